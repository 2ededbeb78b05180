#include "src/core/c_api_checks.hpp"

#include <iterator>

namespace arcoll::c_api {

// The C values are part of the ABI: they must match the C++ enums one for one.
static_assert(ARCOLL_F32 == static_cast<int>(DataType::f32));
static_assert(ARCOLL_F64 == static_cast<int>(DataType::f64));
static_assert(ARCOLL_F16 == static_cast<int>(DataType::f16));
static_assert(ARCOLL_BF16 == static_cast<int>(DataType::bf16));
static_assert(ARCOLL_I8 == static_cast<int>(DataType::i8));
static_assert(ARCOLL_U8 == static_cast<int>(DataType::u8));
static_assert(ARCOLL_I32 == static_cast<int>(DataType::i32));
static_assert(ARCOLL_I64 == static_cast<int>(DataType::i64));
static_assert(std::size(arcoll::kAllDataTypes) == 8);

static_assert(ARCOLL_SUM == static_cast<int>(ReduceOp::sum));
static_assert(ARCOLL_PROD == static_cast<int>(ReduceOp::prod));
static_assert(ARCOLL_MIN == static_cast<int>(ReduceOp::min));
static_assert(ARCOLL_MAX == static_cast<int>(ReduceOp::max));
static_assert(ARCOLL_AVG == static_cast<int>(ReduceOp::avg));
static_assert(std::size(arcoll::kAllReduceOps) == 5);

static_assert(ARCOLL_SUCCESS == static_cast<int>(ErrorCode::ok));
static_assert(ARCOLL_ERROR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::invalid_argument));
static_assert(ARCOLL_ERROR_TIMEOUT == static_cast<int>(ErrorCode::timeout));
static_assert(ARCOLL_ERROR_PEER_FAILURE == static_cast<int>(ErrorCode::peer_failure));
static_assert(ARCOLL_ERROR_PROTOCOL == static_cast<int>(ErrorCode::protocol));
static_assert(ARCOLL_ERROR_SYSTEM == static_cast<int>(ErrorCode::system));
static_assert(ARCOLL_ERROR_CONFIGURATION == static_cast<int>(ErrorCode::configuration));
static_assert(ARCOLL_ERROR_INTERNAL == static_cast<int>(ErrorCode::internal));

namespace {

constexpr const char kErrorLost[] = "arcoll: out of memory while recording the error message";

// The last failure on this thread; see arcoll_last_error().
thread_local std::string last_error_text;
thread_local const char* last_error_message = "";

}  // namespace

arcoll_result_t fail(arcoll_result_t code, std::string_view text, std::string_view more,
                     std::string_view detail) {
  try {
    last_error_text.assign(text);
    last_error_text.append(more);
    last_error_text.append(detail);
    last_error_message = last_error_text.c_str();
  } catch (...) {
    last_error_message = kErrorLost;
  }
  return code;
}

arcoll_result_t to_result(ErrorCode code) {
  const int value = static_cast<int>(code);
  // An exception never means success; an unknown code is our bug.
  if (value <= ARCOLL_SUCCESS || value > ARCOLL_ERROR_INTERNAL) return ARCOLL_ERROR_INTERNAL;
  return static_cast<arcoll_result_t>(value);
}


[[noreturn]] void invalid(const char* function, std::string message) {
  throw arcoll::InvalidArgument(function, std::move(message));
}



arcoll::Communicator& get(const char* function, const arcoll_comm_t* comm) {
  if (comm == nullptr) invalid(function, "the communicator is NULL");
  if (!live_handles<arcoll_comm>().contains(comm))
    invalid(function,
            "not a live communicator: destroyed already, or not made by arcoll_comm_init*");
  return *comm->impl;
}

arcoll::Work& get(const char* function, const arcoll_work_t* work) {
  if (work == nullptr) invalid(function, "the work handle is NULL");
  if (!live_handles<arcoll_work>().contains(work))
    invalid(function, "not a live work handle: freed already, or not made by arcoll_i*");
  return *work->impl;
}

arcoll::ParameterServer& get(const char* function, const arcoll_ps_t* ps) {
  if (ps == nullptr) invalid(function, "the parameter server is NULL");
  if (!live_handles<arcoll_ps>().contains(ps))
    invalid(function, "not a live parameter server: destroyed already, or not made by "
                      "arcoll_ps_create");
  return *ps->impl;
}


arcoll_result_t result_of(const std::exception_ptr& error) noexcept {
  if (!error) return ARCOLL_SUCCESS;
  return guarded("arcoll_work_wait", [&] { std::rethrow_exception(error); });
}

std::span<const std::size_t> per_rank(const char* function, const arcoll::Communicator& comm,
                                      const size_t* values, const char* name) {
  if (values == nullptr) invalid(function, std::string(name) + " is NULL");
  return {values, static_cast<std::size_t>(comm.size())};
}

DataType data_type(const char* function, arcoll_datatype_t type) {
  const int value = static_cast<int>(type);
  if (value < ARCOLL_F32 || value > ARCOLL_I64)
    invalid(function, std::to_string(value) + " is not an arcoll_datatype_t");
  return static_cast<DataType>(value);
}

ReduceOp reduce_op(const char* function, arcoll_op_t op) {
  const int value = static_cast<int>(op);
  if (value < ARCOLL_SUM || value > ARCOLL_AVG)
    invalid(function, std::to_string(value) + " is not an arcoll_op_t");
  return static_cast<ReduceOp>(value);
}

const char* last_error() {
  return last_error_message;
}

}  // namespace arcoll::c_api
