// --profile-layers: the measured time of every stage written as a replay model file, so that
// `arbench replay --model FILE` (and the iteration model behind it) predicts this training's
// iteration time; the prediction is printed beside the measurement.
#pragma once

#include <string>

#include "arcoll/communicator.hpp"
#include "replay/predict.hpp"
#include "trainer.hpp"

namespace arbench::train {

// A replay model (JSON, replay/model.hpp's format with seconds) of `net` at `batch` per rank:
// a first layer "step" without tensors for the rest of an iteration (the batch's sampling and
// the optimizer's update, which precede the next forward), then one layer per stage.
void write_layer_profile(const std::string& path, const StagedNet& net, const std::string& name,
                         int batch, const Trainer::StageTimes& times);

// One iteration of `config` as the replayer's model predicts it from the file at `path`, with
// all-reduce times from this communicator's cost model (calibrate it first with set_tuning).
arcoll::replay::Prediction predict_iteration_from_profile(const arcoll::Communicator& comm,
                                                          const std::string& path,
                                                          const TrainConfig& config);

}  // namespace arbench::train
