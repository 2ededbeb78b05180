#include "results.hpp"

#include <algorithm>
#include <map>

#include "arbench/text.hpp"

namespace arbench::train {
namespace {

std::string or_dash(bool present, const std::string& text) {
  return present ? text : "-";
}

}  // namespace

std::string table_header() {
  return printf_string("#\n# %-8s %-52s %9s %9s %9s %7s %9s %9s %8s %6s %6s %8s %11s %9s\n",
                       "backend", "configuration", "iter p50", "iter p95", "samples/s", "scaling",
                       "exposed", "to target", "accuracy", "usr%", "sys%", "RSS MiB", "allreduced",
                       "|dw|max") +
         printf_string("# %-8s %-52s %9s %9s %9s %7s %9s %9s %8s %6s %6s %8s %11s %9s\n", "", "",
                       "(ms)", "(ms)", "", "", "(ms)", "(s)", "(%)", "", "", "", "", "");
}

std::string table_row(const TrainRow& row) {
  const TrainResult& r = row.result;
  return printf_string(
      "  %-8s %-52s %9.2f %9.2f %9.1f %7s %9.2f %9s %8s %6.0f %6.0f %8.0f %11s %9s\n",
      r.backend.c_str(), row.config.label().c_str(), r.iteration_p50 * 1e3, r.iteration_p95 * 1e3,
      r.samples_per_second,
      or_dash(r.scaling_efficiency > 0, printf_string("%.2f", r.scaling_efficiency)).c_str(),
      r.exposed_seconds * 1e3,
      or_dash(r.time_to_target.has_value(), printf_string("%.1f", r.time_to_target.value_or(0)))
          .c_str(),
      or_dash(r.final_accuracy >= 0, printf_string("%.2f", 100 * r.final_accuracy)).c_str(),
      r.cpu_user_percent, r.cpu_system_percent, r.peak_rss_mib,
      format_bytes(r.bytes_allreduced).c_str(),
      or_dash(r.weights_max_difference >= 0, printf_string("%.1e", r.weights_max_difference))
          .c_str());
}

std::string backend_comparison(const std::vector<TrainRow>& rows) {
  std::string text;
  std::map<std::string, const TrainRow*> first;  // by configuration
  for (const TrainRow& row : rows) {
    auto [it, added] = first.try_emplace(row.config.label(), &row);
    if (added || row.result.iteration_p50 <= 0) continue;
    const TrainResult& base = it->second->result;
    text += printf_string(
        "# %s's iteration takes %.2fx %s's (%s); exposed communication %.2f vs %.2f ms\n",
        row.result.backend.c_str(), row.result.iteration_p50 / base.iteration_p50,
        base.backend.c_str(), row.config.label().c_str(), row.result.exposed_seconds * 1e3,
        base.exposed_seconds * 1e3);
  }
  return text;
}

std::string ranking(const std::vector<TrainRow>& rows, double target_accuracy) {
  std::vector<const TrainRow*> order;
  for (const TrainRow& row : rows) order.push_back(&row);
  const bool evaluated = !rows.empty() && rows.front().result.final_accuracy >= 0;
  std::stable_sort(order.begin(), order.end(), [&](const TrainRow* a, const TrainRow* b) {
    const TrainResult &x = a->result, &y = b->result;
    if (!evaluated) return x.iteration_p50 < y.iteration_p50;
    if (x.time_to_target.has_value() != y.time_to_target.has_value())
      return x.time_to_target.has_value();
    if (x.time_to_target) return *x.time_to_target < *y.time_to_target;
    return x.final_accuracy > y.final_accuracy;
  });
  std::string text =
      evaluated ? printf_string("#\n# ranked by time to %.1f%% test accuracy, then by accuracy:\n",
                                100 * target_accuracy)
                : "#\n# ranked by iteration time:\n";
  for (std::size_t i = 0; i < order.size(); ++i) {
    const TrainResult& r = order[i]->result;
    std::string outcome;
    if (evaluated)
      outcome =
          printf_string("%.2f%%", 100 * r.final_accuracy) +
          (r.time_to_target ? printf_string(" (target after %.1f s)", *r.time_to_target) : "") +
          ", ";
    text += printf_string("# %2zu. %-8s %-52s %s%.1f s of training, %.2f ms per iteration\n", i + 1,
                          r.backend.c_str(), order[i]->config.label().c_str(), outcome.c_str(),
                          r.training_seconds, r.iteration_p50 * 1e3);
  }
  if (!order.empty()) {
    const TrainRow& best = *order.front();
    text += "# best here: " + best.result.backend + ", " + best.config.label();
    if (evaluated)
      text += best.result.time_to_target
                  ? printf_string(": %.1f%% reached after %.1f s", 100 * target_accuracy,
                                  *best.result.time_to_target)
                  : printf_string(": none reached %.1f%%; best accuracy %.2f%%",
                                  100 * target_accuracy, 100 * best.result.final_accuracy);
    text += "\n";
  }
  return text;
}

nlohmann::json results_json(const std::vector<TrainRow>& rows, const nlohmann::json& metadata) {
  nlohmann::json runs = nlohmann::json::array();
  for (const TrainRow& row : rows) {
    const TrainConfig& c = row.config;
    const TrainResult& r = row.result;
    nlohmann::json curve = nlohmann::json::array();
    for (const EpochPoint& p : r.curve)
      curve.push_back({{"epoch", p.epoch},
                       {"train_seconds", p.train_seconds},
                       {"accuracy", p.accuracy},
                       {"loss", p.loss}});
    runs.push_back({
        {"backend", r.backend},
        {"description", r.description},
        {"configuration",
         {{"label", c.label()},
          {"model", c.model},
          {"policy", c.policy},
          {"bucket_bytes", c.bucket_bytes},
          {"algorithm", c.algorithm},
          {"wire", std::string(arcoll::to_string(c.wire))},
          {"error_feedback", c.error_feedback},
          {"batch_per_rank", c.batch},
          {"lr", c.lr},
          {"reference_batch", c.reference_batch},
          {"lr_scaling", to_string(c.lr_scaling)},
          {"warmup_epochs", c.warmup_epochs},
          {"lars", c.lars},
          {"momentum", c.momentum},
          {"weight_decay", c.weight_decay},
          {"epochs", c.epochs},
          {"seed", c.seed}}},
        {"iteration_p50_s", r.iteration_p50},
        {"iteration_p95_s", r.iteration_p95},
        {"samples_per_s", r.samples_per_second},
        {"single_rank_iteration_s", r.single_rank_iteration},
        {"scaling_efficiency", r.scaling_efficiency},
        {"exposed_communication_s", r.exposed_seconds},
        {"time_to_target_s",
         r.time_to_target ? nlohmann::json(*r.time_to_target) : nlohmann::json()},
        {"final_accuracy",
         r.final_accuracy >= 0 ? nlohmann::json(r.final_accuracy) : nlohmann::json()},
        {"cpu_user_percent", r.cpu_user_percent},
        {"cpu_system_percent", r.cpu_system_percent},
        {"peak_rss_mib", r.peak_rss_mib},
        {"bytes_allreduced", r.bytes_allreduced},
        {"buckets", r.buckets},
        {"training_seconds", r.training_seconds},
        {"weights_max_difference", r.weights_max_difference >= 0
                                       ? nlohmann::json(r.weights_max_difference)
                                       : nlohmann::json()},
        {"predicted_iteration_s",
         row.predicted_iteration >= 0 ? nlohmann::json(row.predicted_iteration) : nlohmann::json()},
        {"curve", curve},
    });
  }
  return {{"schema", "arbench.train/1"}, {"metadata", metadata}, {"runs", runs}};
}

}  // namespace arbench::train
