#include "replay/trace_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/memory_env.h"
#include "testing/status_matchers.h"

namespace kvtier::replay {
namespace {

using ::kvtier::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kGood =
    R"({"timestamp": 0, "input_length": 1100, "output_length": 6, "hash_ids": [0, 1, 2]})";

TEST(TraceReader, ParsesALine) {
  Result<TraceRequest> r = ParseTraceLine(kGood, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->timestamp, 0u);
  EXPECT_EQ(r->input_length, 1100u);
  EXPECT_EQ(r->output_length, 6u);
  EXPECT_THAT(r->hash_ids, ElementsAre(0u, 1u, 2u));
}

TEST(TraceReader, FieldOrderDoesNotMatterAndIdsMayBeLarge) {
  Result<TraceRequest> r = ParseTraceLine(
      R"({"hash_ids":[18446744073709551615],"output_length":0,"input_length":1,"timestamp":7})", 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(r->hash_ids, ElementsAre(UINT64_MAX));
  EXPECT_EQ(r->timestamp, 7u);
}

struct BadLine {
  std::string line;
  std::string message;  // expected substring
};

TEST(TraceReader, BadLinesNameTheLineAndTheProblem) {
  const std::vector<BadLine> cases = {
      {"", "line 9: empty line"},
      {"  \r", "line 9: empty line"},
      {"not json", "line 9: not a JSON object"},
      {"[1, 2]", "line 9: expected a JSON object"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1})", "missing field hash_ids"},
      {R"({"input_length": 1, "output_length": 1, "hash_ids": []})", "missing field timestamp"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [], "x": 1})",
       "unknown field \"x\""},
      {R"({"timestamp": 0, "timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []})",
       "line 9: not a JSON object"},  // duplicate key
      {R"({"timestamp": -5, "input_length": 1, "output_length": 1, "hash_ids": []})",
       "timestamp must be a non-negative integer (plain digits), got -5"},
      {R"({"timestamp": 1.5, "input_length": 1, "output_length": 1, "hash_ids": []})", "got 1.5"},
      {R"({"timestamp": 0, "input_length": "7", "output_length": 1, "hash_ids": []})",
       "input_length must be a non-negative integer (plain digits), got a string"},
      {R"({"timestamp": 0, "input_length": 4294967296, "output_length": 1, "hash_ids": []})",
       "input_length 4294967296 is over the limit of 4294967295"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": 3})",
       "hash_ids must be an array"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, -2]})",
       "hash_ids[1] must be a non-negative integer below 2^64 (plain digits), got -2"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [18446744073709551616]})",
       "hash_ids[0] must be"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [[1]]})",
       "line 9: not a JSON object"},  // too deep
      {R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": ["a"]})",
       "got a non-number"},
      {"{\"timestamp\": 0, \"in\xff\": 1}", "line 9: not UTF-8 at byte 21"},
      {std::string(kGood) + " x", "line 9: not a JSON object"},
  };
  for (const BadLine& c : cases) {
    Result<TraceRequest> r = ParseTraceLine(c.line, 9);
    EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr(c.message))) << c.line;
  }
}

TEST(TraceReader, LimitsOnLineLengthAndArraySize) {
  TraceReadOptions o;
  o.max_blocks_per_request = 2;
  EXPECT_THAT(ParseTraceLine(kGood, 3, o),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("line 3: hash_ids has 3 entries, over the limit of 2")));
  o = TraceReadOptions{};
  o.max_line_bytes = 20;
  EXPECT_THAT(ParseTraceLine(kGood, 3, o),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("line 3: longer than the limit of 20 bytes")));
}

TEST(TraceReader, ParseTraceCountsLinesAndAllowsAMissingFinalNewline) {
  const std::string two = std::string(kGood) + "\n" + kGood;
  Result<std::vector<TraceRequest>> t = ParseTrace(two);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->size(), 2u);
  EXPECT_EQ(ParseTrace(two + "\n")->size(), 2u);
  // A blank line in the middle (or a second newline at the end) is an error.
  EXPECT_THAT(ParseTrace(std::string(kGood) + "\n\n" + kGood),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("line 2: empty line")));
  EXPECT_THAT(ParseTrace(two + "\n\n"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("line 3: empty line")));
  EXPECT_THAT(ParseTrace(""), StatusIs(StatusCode::kInvalidArgument, HasSubstr("no request")));
  EXPECT_THAT(ParseTrace(std::string(kGood) + "\n{\"timestamp\": 1}\n"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("line 2: missing field")));
}

TEST(TraceReader, MaxRequestsStopsBeforeLaterBadLines) {
  TraceReadOptions o;
  o.max_requests = 1;
  Result<std::vector<TraceRequest>> t = ParseTrace(std::string(kGood) + "\ngarbage\n", o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->size(), 1u);
}

TEST(TraceReader, TotalBlockLimit) {
  TraceReadOptions o;
  o.max_total_blocks = 5;
  EXPECT_THAT(ParseTrace(std::string(kGood) + "\n" + kGood, o),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("line 2: the trace holds more than 5 hash ids")));
}

class ReadTraceTest : public ::testing::Test {
 protected:
  void Write(const std::string& path, const std::string& text) {
    ASSERT_TRUE(env_.CreateDirs("/t", 0755).ok());
    std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(text.data()), text.size());
    ASSERT_TRUE(env_.WriteFileAtomic(path, bytes, WriteFileOptions{}).ok());
  }
  MemoryEnv env_;
};

TEST_F(ReadTraceTest, ReadsInChunksAcrossLineBoundaries) {
  // More than one 1 MiB read chunk, so lines straddle chunk ends.
  std::string text;
  const int kLines = 20000;
  for (int i = 0; i < kLines; ++i) {
    text += R"({"timestamp": )" + std::to_string(i) +
            R"(, "input_length": 1024, "output_length": 1, "hash_ids": [)" + std::to_string(i) +
            ", " + std::to_string(i + 1) + "]}\n";
  }
  ASSERT_GT(text.size(), size_t{1} << 20);
  Write("/t/trace.jsonl", text);
  Result<std::vector<TraceRequest>> t = ReadTrace(&env_, "/t/trace.jsonl");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), static_cast<size_t>(kLines));
  for (int i = 0; i < kLines; ++i) {
    ASSERT_EQ((*t)[i].timestamp, static_cast<uint64_t>(i));
    ASSERT_THAT((*t)[i].hash_ids, ElementsAre(i, i + 1));
  }
  TraceReadOptions o;
  o.max_requests = 3;
  EXPECT_EQ(ReadTrace(&env_, "/t/trace.jsonl", o)->size(), 3u);
}

TEST_F(ReadTraceTest, ErrorsNameThePath) {
  Write("/t/bad.jsonl", std::string(kGood) + "\n" + R"({"timestamp": 1})" + "\n");
  EXPECT_THAT(ReadTrace(&env_, "/t/bad.jsonl"),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("/t/bad.jsonl: line 2: missing field input_length")));
  EXPECT_THAT(ReadTrace(&env_, "/t/none.jsonl"), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(ReadTrace(&env_, "/t"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
}

TEST_F(ReadTraceTest, AnOverlongLineIsRefusedWithoutReadingItAll) {
  // A 3 MiB line with no newline: refused once the pending bytes pass the
  // limit, naming its line number.
  std::string text = std::string(kGood) + "\n" + std::string(3 << 20, ' ');
  Write("/t/long.jsonl", text);
  TraceReadOptions o;
  o.max_line_bytes = 1000;
  EXPECT_THAT(ReadTrace(&env_, "/t/long.jsonl", o),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("line 2: longer than the limit of 1000 bytes")));
}

}  // namespace
}  // namespace kvtier::replay
