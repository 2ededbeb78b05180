#include "arbench/collectives.hpp"

#include <utility>

namespace arbench {

bool splits_row(Coll coll) {
  return coll == Coll::allgather || coll == Coll::reduce_scatter || coll == Coll::alltoall ||
         coll == Coll::gather || coll == Coll::scatter;
}

std::string_view to_string(Coll coll) {
  switch (coll) {
    case Coll::allreduce:
      return "allreduce";
    case Coll::allgather:
      return "allgather";
    case Coll::reduce_scatter:
      return "reduce_scatter";
    case Coll::broadcast:
      return "broadcast";
    case Coll::reduce:
      return "reduce";
    case Coll::alltoall:
      return "alltoall";
    case Coll::gather:
      return "gather";
    case Coll::scatter:
      return "scatter";
    case Coll::sendrecv:
      return "sendrecv";
  }
  return "?";
}

std::optional<Coll> parse_coll(std::string_view name) {
  static const std::pair<std::string_view, Coll> kNcclTestsNames[] = {
      {"all_reduce", Coll::allreduce}, {"all_gather", Coll::allgather}, {"all_to_all", Coll::alltoall}};
  for (Coll coll : kAllColls)
    if (name == to_string(coll)) return coll;
  for (const auto& [alias, coll] : kNcclTestsNames)
    if (name == alias) return coll;
  return std::nullopt;
}

std::size_t row_elements(Coll coll, std::size_t count, int ranks) {
  const auto n = static_cast<std::size_t>(ranks);
  return splits_row(coll) ? count / n * n : count;
}

CollShape shape(Coll coll, std::size_t count, int ranks, int rank, int root) {
  const auto n = static_cast<std::size_t>(ranks);
  const auto r = static_cast<std::size_t>(rank);
  CollShape s;
  s.block = splits_row(coll) ? count / n : count;
  const std::size_t whole = s.block * (splits_row(coll) ? n : 1);
  s.send = s.recv = whole;
  switch (coll) {
    case Coll::allgather:
      s.send = s.block;
      s.send_in_recv = r * s.block;
      break;
    case Coll::gather:
      s.send = s.block;
      s.recv = rank == root ? whole : 0;
      s.send_in_recv = r * s.block;
      break;
    case Coll::reduce_scatter:
      s.recv = s.block;
      s.in_recv = false;
      s.recv_in_send = r * s.block;
      break;
    case Coll::scatter:
      s.send = rank == root ? whole : 0;
      s.recv = s.block;
      s.in_recv = false;
      s.recv_in_send = r * s.block;
      break;
    default:
      break;
  }
  return s;
}

double bus_factor(Coll coll, int ranks) {
  const double n = ranks;
  switch (coll) {
    case Coll::allreduce:
      return 2 * (n - 1) / n;
    case Coll::broadcast:
    case Coll::reduce:
    case Coll::sendrecv:
      return 1;
    default:
      return (n - 1) / n;
  }
}

bool reduces(Coll coll) {
  return coll == Coll::allreduce || coll == Coll::reduce_scatter || coll == Coll::reduce;
}

bool rooted(Coll coll) {
  return coll == Coll::broadcast || coll == Coll::reduce || coll == Coll::gather ||
         coll == Coll::scatter;
}

}  // namespace arbench
