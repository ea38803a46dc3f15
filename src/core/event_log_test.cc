// EventLog: one line per kind per interval, the suppressed ones counted in
// the next line, kinds independent, the clock the Env's.
#include "core/event_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/memory_env.h"
#include "testing/recording_logger.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(EventLog, OneLinePerKindPerIntervalWithTheSuppressedCount) {
  MemoryEnv env;
  testing::RecordingLogger logger;
  EventLog log(&logger, &env, /*interval_micros=*/10'000'000);
  int built = 0;
  auto emit = [&](size_t kind, const std::string& text) {
    log.Emit(kind, LogLevel::kWarning, [&] {
      ++built;
      return text;
    });
  };
  emit(0, "first");
  emit(0, "second");
  emit(0, "third");
  emit(1, "other kind");
  ASSERT_EQ(logger.Lines().size(), 2u);
  EXPECT_EQ(logger.Lines()[0].message, "first");
  EXPECT_EQ(logger.Lines()[0].level, LogLevel::kWarning);
  EXPECT_EQ(logger.Lines()[1].message, "other kind");
  EXPECT_EQ(built, 2);  // a suppressed line is never formatted

  env.AdvanceClock(9'999'999);
  emit(0, "still too soon");
  EXPECT_EQ(logger.Lines().size(), 2u);
  env.AdvanceClock(1);
  emit(0, "later");
  ASSERT_EQ(logger.Lines().size(), 3u);
  EXPECT_EQ(logger.Lines()[2].message, "later (3 more since the last report)");

  env.AdvanceClock(10'000'000);
  emit(0, "alone");
  ASSERT_EQ(logger.Lines().size(), 4u);
  EXPECT_THAT(logger.Lines()[3].message, Not(HasSubstr("more since")));
}

TEST(EventLog, NoLoggerBuildsNothing) {
  MemoryEnv env;
  EventLog log(nullptr, &env);
  EXPECT_FALSE(log.enabled());
  bool built = false;
  log.Emit(0, LogLevel::kError, [&] {
    built = true;
    return std::string("x");
  });
  EXPECT_FALSE(built);
}

TEST(LogLevel, Names) {
  EXPECT_EQ(LogLevelName(LogLevel::kDebug), "debug");
  EXPECT_EQ(LogLevelName(LogLevel::kInfo), "info");
  EXPECT_EQ(LogLevelName(LogLevel::kWarning), "warning");
  EXPECT_EQ(LogLevelName(LogLevel::kError), "error");
}

}  // namespace
}  // namespace kvtier
