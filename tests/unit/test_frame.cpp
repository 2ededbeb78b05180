// The TCP transport's frame and hello validation: everything read from a socket is checked.
#include <gtest/gtest.h>

#include <random>

#include "transports/tcp/frame.hpp"

namespace arcoll::tcp {
namespace {

TEST(Frame, WellFormedHeadersPass) {
  EXPECT_EQ(validate(make_data_header(7, 0, 0, 0, 0, 0)), "");
  EXPECT_EQ(validate(make_data_header(7, 0, 3, 1000, 600, 400)), "");
  EXPECT_EQ(validate(make_control_header(FrameKind::goodbye, 0)), "");
  EXPECT_EQ(validate(make_control_header(FrameKind::abort, 100)), "");
}

TEST(Frame, EachBrokenFieldIsNamed) {
  auto h = make_data_header(1, 0, 0, 100, 0, 100);
  h.magic ^= 1;
  EXPECT_NE(validate(h).find("magic"), std::string::npos);
  h = make_data_header(1, 0, 0, 100, 0, 100);
  h.version = 9;
  EXPECT_NE(validate(h).find("version"), std::string::npos);
  h = make_data_header(1, 0, 0, 100, 0, 100);
  h.kind = 77;
  EXPECT_NE(validate(h).find("kind"), std::string::npos);
  h = make_data_header(1, 0, 0, 100, 50, 51);  // runs past the message
  EXPECT_NE(validate(h).find("outside"), std::string::npos);
  h = make_data_header(1, 0, 0, kMaxMessageBytes + 1, 0, 1);
  EXPECT_NE(validate(h).find("message size"), std::string::npos);
  h = make_data_header(1, 0, 0, 1ull << 30, 0, kMaxFramePayload + 1);
  EXPECT_NE(validate(h).find("payload"), std::string::npos);
  h = make_data_header(1, 0, 0, 10, 0, 0);
  EXPECT_NE(validate(h).find("empty frame"), std::string::npos);
  h = make_control_header(FrameKind::goodbye, 0);
  h.length = 5;
  EXPECT_NE(validate(h), "");
  h = make_control_header(FrameKind::abort, kMaxAbortText + 1);
  EXPECT_NE(validate(h), "");
  h = make_data_header(1, 0, 0, 100, 0, 100);
  h.reserved = 1;
  EXPECT_NE(validate(h), "");
}

TEST(Frame, RandomBytesAreAlmostNeverAcceptedAndNeverOutOfBounds) {
  std::mt19937_64 rng(1234);
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    FrameHeader h;
    auto* bytes = reinterpret_cast<unsigned char*>(&h);
    for (std::size_t b = 0; b < sizeof h; ++b) bytes[b] = static_cast<unsigned char>(rng());
    if (i % 2 == 0) {  // give half of them a valid magic and version to reach deeper checks
      h.magic = kFrameMagic;
      h.version = kVersion;
    }
    if (validate(h).empty()) {
      ++accepted;
      // Whatever passes stays within its message and the limits.
      EXPECT_LE(h.length, kMaxFramePayload);
      EXPECT_LE(static_cast<unsigned __int128>(h.offset) + h.length, h.message_bytes);
    }
  }
  EXPECT_LT(accepted, 10);
}

TEST(Hello, ChecksJobWorldRankAndSocket) {
  const HelloExpectation expect{42, 4, 2};
  EXPECT_EQ(validate(make_hello(3, 4, 1, 42), expect), "");
  EXPECT_NE(validate(make_hello(3, 4, 1, 43), expect).find("another job"), std::string::npos);
  EXPECT_NE(validate(make_hello(3, 5, 1, 42), expect).find("world size"), std::string::npos);
  EXPECT_NE(validate(make_hello(4, 4, 1, 42), expect).find("out of range"), std::string::npos);
  EXPECT_NE(validate(make_hello(-1, 4, 1, 42), expect).find("out of range"), std::string::npos);
  EXPECT_NE(validate(make_hello(1, 4, 2, 42), expect).find("socket index"), std::string::npos);
  Hello bad = make_hello(1, 4, 0, 42);
  bad.magic = 0;
  EXPECT_NE(validate(bad, expect).find("magic"), std::string::npos);
}

}  // namespace
}  // namespace arcoll::tcp
