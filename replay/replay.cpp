#include "replay/replay.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "arcoll/parameter_server.hpp"

namespace arcoll::replay {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The time some message was in flight: the spans' union (their sum when they run one after
// another, as all-reduces on one stream do; less when push_pulls overlap).
double covered(std::vector<BucketSpan> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const BucketSpan& a, const BucketSpan& b) { return a.start < b.start; });
  double total = 0, reached = -1e300;
  for (const BucketSpan& s : spans) {
    const double from = std::max(s.start, reached);
    if (s.end > from) total += s.end - from;
    reached = std::max(reached, s.end);
  }
  return total;
}

// Sleeps until `until`, the way compute on a GPU leaves the host's cores to others.
void compute_until(Clock::time_point until) {
  std::this_thread::sleep_until(until);
}

// The communication thread: all-reduces the buckets handed to it, in order, and says when each
// ended. Errors are passed back to the compute thread.
class CommunicationThread {
 public:
  CommunicationThread(Communicator& comm, std::vector<std::vector<float>>& buffers)
      : comm_(comm), buffers_(buffers), thread_([this] { loop(); }) {}
  ~CommunicationThread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void start(std::size_t bucket) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(bucket);
    }
    wake_.notify_all();
  }
  // Waits until `count` buckets of this iteration have ended; their end times (from `origin`).
  std::vector<std::pair<double, double>> wait_all(std::size_t count, Clock::time_point origin) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return finished_.size() >= count || error_; });
    if (error_) std::rethrow_exception(error_);
    std::vector<std::pair<double, double>> spans;
    for (const auto& [start, end] : finished_)
      spans.emplace_back(std::chrono::duration<double>(start - origin).count(),
                         std::chrono::duration<double>(end - origin).count());
    finished_.clear();
    return spans;
  }

 private:
  void loop() {
    while (true) {
      std::size_t bucket;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        bucket = queue_.front();
        queue_.pop_front();
      }
      const auto start = Clock::now();
      try {
        auto& buffer = buffers_[bucket];
        comm_.allreduce(buffer.data(), buffer.size(), DataType::f32, ReduceOp::avg);
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
        done_.notify_all();
        return;
      }
      std::lock_guard lock(mutex_);
      finished_.emplace_back(start, Clock::now());
      done_.notify_all();
    }
  }

  Communicator& comm_;
  std::vector<std::vector<float>>& buffers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<std::size_t> queue_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> finished_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

double forward_seconds(const ReplayConfig& config, const Layer& layer) {
  if (layer.forward_seconds >= 0)
    return layer.forward_seconds * config.batch / config.model.measured_batch;
  return config.device.seconds(layer.forward_flops * config.batch, config.half_compute);
}

double backward_seconds(const ReplayConfig& config, const Layer& layer) {
  if (layer.backward_seconds >= 0)
    return layer.backward_seconds * config.batch / config.model.measured_batch;
  return config.device.seconds(layer.backward_flops * config.batch, config.half_compute);
}

namespace {

// The ps policy (MXNet's kvstore) on a parameter server with a share in every rank: each
// layer's push_pull starts when its backward is done and must be back before that layer's
// forward in the next iteration. An iteration's communication is what waiting for pulls adds
// to its forward (exposed); a bucket's span runs from its start to its pull's return.
void replay_parameter_server(Communicator& comm, const ReplayConfig& config, ReplayResult& result,
                             std::vector<std::vector<float>>& buffers,
                             const std::vector<double>& backward, double forward) {
  const auto& layers = config.model.layers;
  const std::size_t n = layers.size();
  ParameterServer server(comm, {});
  for (std::size_t b = 0; b < buffers.size(); ++b)
    server.register_tensor(b + 1, buffers[b].size(), DataType::f32);
  std::vector<int> bucket_of(n, -1);  // by layer in forward order
  for (std::size_t b = 0; b < result.plan.size(); ++b)
    bucket_of[n - 1 - result.plan[b].ready_after] = static_cast<int>(b);
  // A push_pull in flight: the iteration that started it, and when its pull came back.
  struct Flight {
    WorkPtr work;
    std::size_t iteration = 0;
    std::shared_ptr<std::atomic<double>> back;
  };
  std::vector<Flight> flights(result.plan.size());
  std::vector<IterationRecord> records;
  std::vector<double> origins;  // each iteration's start, from `epoch`
  comm.barrier();
  const auto epoch = Clock::now();
  // Waits for a flight and closes its span in the iteration that started it.
  auto land = [&](std::size_t bucket) {
    Flight& f = flights[bucket];
    if (!f.work) return;
    f.work->wait();
    IterationRecord& record = records[f.iteration];
    record.buckets[bucket].end = f.back->load() - origins[f.iteration];
    record.communication = covered(record.buckets);
    f.work.reset();
  };
  for (int iteration = 0; iteration < config.warmup + config.iterations; ++iteration) {
    const auto origin = Clock::now();
    origins.push_back(since(epoch) - since(origin));
    records.emplace_back();
    IterationRecord& record = records.back();
    record.buckets.resize(result.plan.size());
    auto at = origin;
    for (std::size_t l = 0; l < n; ++l) {
      if (bucket_of[l] >= 0) {
        const auto before = Clock::now();
        land(static_cast<std::size_t>(bucket_of[l]));
        record.exposed += since(before);
        at = std::max(at, Clock::now());
      }
      at += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(forward_seconds(config, layers[l])));
      compute_until(at);
    }
    record.forward_end = since(origin);
    for (std::size_t b = 0; b < backward.size(); ++b) {
      at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backward[b]));
      compute_until(at);
      const int bucket = bucket_of[n - 1 - b];
      if (bucket < 0) continue;
      const auto i = static_cast<std::size_t>(bucket);
      const double now = since(origin);
      record.buckets[i] = {result.plan[i].elements * sizeof(float), now, now, now};
      Flight& f = flights[i];
      f.iteration = records.size() - 1;
      f.back = std::make_shared<std::atomic<double>>(0);
      f.work = server.ipush_pull(static_cast<std::uint64_t>(i) + 1, buffers[i].data(),
                                 buffers[i].data());
      f.work->on_completion([back = f.back, epoch](const Work&) { *back = since(epoch); });
    }
    record.backward_end = since(origin);
    record.total = record.backward_end;
    record.compute = forward;
    for (double s : backward) record.compute += s;
  }
  for (std::size_t b = 0; b < flights.size(); ++b) land(b);
  server.finish();
  for (std::size_t i = static_cast<std::size_t>(config.warmup); i < records.size(); ++i)
    result.iterations.push_back(std::move(records[i]));
}

}  // namespace

ReplayResult run_replay(Communicator& comm, const ReplayConfig& config) {
  const auto& layers = config.model.layers;
  std::vector<double> backward;  // in backward order
  for (auto it = layers.rbegin(); it != layers.rend(); ++it)
    backward.push_back(backward_seconds(config, *it));
  double forward = 0;
  for (const Layer& l : layers) forward += forward_seconds(config, l);

  ReplayResult result;
  result.plan = plan_buckets(config.model, config.policy, backward);
  std::vector<std::vector<float>> buffers;
  for (const Bucket& b : result.plan) buffers.emplace_back(b.elements, 1.0f);
  // Buckets by the layer after whose backward they may start.
  std::vector<std::vector<std::size_t>> ready_after(backward.size());
  for (std::size_t i = 0; i < result.plan.size(); ++i)
    ready_after[result.plan[i].ready_after].push_back(i);

  if (config.policy.kind == PolicyKind::ps) {
    replay_parameter_server(comm, config, result, buffers, backward, forward);
    return result;
  }
  comm.set_algorithm(config.algorithm);
  comm.barrier();
  CommunicationThread communication(comm, buffers);
  for (int iteration = 0; iteration < config.warmup + config.iterations; ++iteration) {
    const auto origin = Clock::now();
    IterationRecord record;
    std::vector<double> ready(result.plan.size(), 0);
    auto at = origin +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(forward));
    compute_until(at);
    record.forward_end = since(origin);
    for (std::size_t b = 0; b < backward.size(); ++b) {
      at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backward[b]));
      compute_until(at);
      for (std::size_t bucket : ready_after[b]) {
        ready[bucket] = since(origin);
        communication.start(bucket);
      }
    }
    record.backward_end = since(origin);
    record.compute = forward;
    for (double s : backward) record.compute += s;
    const auto spans = communication.wait_all(result.plan.size(), origin);
    record.total = since(origin);
    for (std::size_t i = 0; i < spans.size(); ++i) {
      record.buckets.push_back(
          {result.plan[i].elements * sizeof(float), ready[i], spans[i].first, spans[i].second});
      record.communication += spans[i].second - spans[i].first;
    }
    record.exposed = std::max(0.0, record.total - record.backward_end);
    if (iteration >= config.warmup) result.iterations.push_back(std::move(record));
  }
  return result;
}

std::vector<std::vector<IterationRecord>> gather_iterations(Communicator& comm,
                                                            const ReplayResult& result) {
  // Every rank has the same plan, so each iteration flattens to the same number of values.
  const std::size_t buckets = result.plan.size();
  const std::size_t per_iteration = 4 + 3 * buckets;
  std::vector<double> mine;
  for (const IterationRecord& r : result.iterations) {
    mine.insert(mine.end(), {r.forward_end, r.backward_end, r.total, r.compute});
    for (const BucketSpan& b : r.buckets) mine.insert(mine.end(), {b.ready, b.start, b.end});
  }
  std::vector<double> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.allgather(mine.data(), all.data(), mine.size(), DataType::f64);
  std::vector<std::vector<IterationRecord>> ranks(static_cast<std::size_t>(comm.size()));
  const double* v = all.data();
  for (auto& rank : ranks)
    for (std::size_t i = 0; i < result.iterations.size(); ++i, v += per_iteration) {
      IterationRecord r;
      r.forward_end = v[0];
      r.backward_end = v[1];
      r.total = v[2];
      r.compute = v[3];
      for (std::size_t b = 0; b < buckets; ++b) {
        const double* s = v + 4 + 3 * b;
        r.buckets.push_back({result.plan[b].elements * sizeof(float), s[0], s[1], s[2]});
      }
      r.communication = covered(r.buckets);
      r.exposed = std::max(0.0, r.total - r.backward_end);
      rank.push_back(std::move(r));
    }
  return ranks;
}

std::string chrome_trace(const std::vector<std::vector<IterationRecord>>& ranks,
                         const std::string& title) {
  using Json = nlohmann::json;
  Json events = Json::array();
  auto span = [&](const std::string& name, int pid, int tid, double start, double end) {
    events.push_back({{"name", name},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", start * 1e6},
                      {"dur", std::max(0.0, end - start) * 1e6}});
  };
  auto label = [&](const char* what, int pid, int tid, const std::string& name) {
    events.push_back(
        {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  };
  const std::size_t iterations = ranks.empty() ? 0 : ranks[0].size();
  std::vector<double> offset(iterations + 1, 0);  // iteration i starts when all ended i-1
  for (std::size_t i = 0; i < iterations; ++i) {
    double slowest = 0;
    for (const auto& rank : ranks) slowest = std::max(slowest, rank[i].total);
    offset[i + 1] = offset[i] + slowest;
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const int pid = static_cast<int>(r);
    label("process_name", pid, 0, "rank " + std::to_string(r));
    label("thread_name", pid, 0, "compute");
    label("thread_name", pid, 1, "all-reduce");
    for (std::size_t i = 0; i < iterations; ++i) {
      const IterationRecord& it = ranks[r][i];
      const double o = offset[i];
      span("forward " + std::to_string(i), pid, 0, o, o + it.forward_end);
      span("backward " + std::to_string(i), pid, 0, o + it.forward_end, o + it.backward_end);
      for (std::size_t b = 0; b < it.buckets.size(); ++b) {
        const BucketSpan& s = it.buckets[b];
        span("all-reduce " + std::to_string(b) + " (" +
                 std::to_string(static_cast<double>(s.bytes) / (1 << 20)).substr(0, 5) + " MiB)",
             pid, 1, o + s.start, o + s.end);
      }
    }
  }
  return Json{{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", {{"title", title}}}}
      .dump(1);
}

}  // namespace arcoll::replay
