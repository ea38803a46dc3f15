// PrometheusTextProblem (testing/prometheus_text.h): what it accepts, and
// that each way a family can lack its HELP, or a HELP line its single
// line, is reported at the line where it happens.
#include "testing/prometheus_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace kvtier {
namespace {

using ::testing::HasSubstr;
using testing::PrometheusTextProblem;
using testing::WellFormedPrometheus;

const std::string kGoodText =
    "# HELP a_total calls, a \\\\ and a \\n in the text\n"
    "# TYPE a_total counter\n"
    "a_total 1\n"
    "# HELP b per signature\n"
    "# TYPE b gauge\n"
    "b{signature=\"x y\\\"z\",compatible=\"true\"} 2\n"
    "b{signature=\"w\"} 3\n"
    "# HELP c an empty family\n"
    "# TYPE c gauge\n"
    "# HELP d_seconds time of one call, in seconds\n"
    "# TYPE d_seconds histogram\n"
    "d_seconds_bucket{le=\"1e-06\"} 0\n"
    "d_seconds_bucket{le=\"+Inf\"} 1\n"
    "d_seconds_sum 3e-06\n"
    "d_seconds_count 1\n";

TEST(PrometheusTextTest, AcceptsFamiliesWithHelpThenType) {
  EXPECT_EQ(PrometheusTextProblem(kGoodText), "");
  EXPECT_TRUE(WellFormedPrometheus(kGoodText));
}

TEST(PrometheusTextTest, TypeWithoutHelpRightBefore) {
  EXPECT_EQ(PrometheusTextProblem("# TYPE a gauge\na 1\n"),
            "line 1: a TYPE line without the HELP line of its family right before it: "
            "\"# TYPE a gauge\"");
  // HELP after TYPE, a blank line or a sample in between: no better.
  EXPECT_THAT(
      PrometheusTextProblem("# HELP a x\n# TYPE a gauge\na 1\n# TYPE b gauge\n# HELP b y\n"),
      HasSubstr("line 4: a TYPE line without the HELP line"));
  EXPECT_THAT(PrometheusTextProblem("# HELP a x\n\n# TYPE a gauge\na 1\n"),
              HasSubstr("line 1: a HELP line not followed by the TYPE line of its family"));
  EXPECT_THAT(PrometheusTextProblem("# HELP a x\na 1\n# TYPE a gauge\n"),
              HasSubstr("line 1: a HELP line not followed by the TYPE line of its family"));
  // The HELP of another family.
  EXPECT_THAT(PrometheusTextProblem("# HELP a x\n# TYPE b gauge\nb 1\n"),
              HasSubstr("line 1: a HELP line not followed by the TYPE line of its family"));
  EXPECT_THAT(PrometheusTextProblem("# HELP a x\n# TYPE a_total counter\na_total 1\n"),
              HasSubstr("line 1: a HELP line not followed by the TYPE line of its family"));
}

TEST(PrometheusTextTest, HelpOnOneLineWithItsEscapes) {
  // A raw newline in the help text: the TYPE line is not the next one.
  EXPECT_EQ(PrometheusTextProblem("# HELP a first\nsecond\n# TYPE a gauge\na 1\n"),
            "line 1: a HELP line not followed by the TYPE line of its family (a newline in its "
            "help?): \"# HELP a first\"");
  EXPECT_THAT(PrometheusTextProblem("# HELP a x\\y\n# TYPE a gauge\na 1\n"),
              HasSubstr("line 1: a backslash not escaped in the help text"));
  EXPECT_THAT(PrometheusTextProblem("# HELP a x\\\n# TYPE a gauge\na 1\n"),
              HasSubstr("line 1: a backslash not escaped in the help text"));
  EXPECT_THAT(PrometheusTextProblem("# HELP a \n# TYPE a gauge\na 1\n"),
              HasSubstr("line 1: empty help text"));
  EXPECT_THAT(PrometheusTextProblem("# HELP a\n# TYPE a gauge\na 1\n"),
              HasSubstr("line 1: a HELP line without help text"));
}

TEST(PrometheusTextTest, SamplesAndLinesOutOfPlace) {
  const std::string head = "# HELP a x\n# TYPE a gauge\n";
  EXPECT_THAT(PrometheusTextProblem("a 1\n" + head),
              HasSubstr("line 1: a sample before any family"));
  EXPECT_THAT(PrometheusTextProblem(head + "b 1\n"),
              HasSubstr("line 3: a sample not of the family a"));
  EXPECT_THAT(PrometheusTextProblem(head + "a_sum 1\n"), HasSubstr("line 3: a sample not of"));
  EXPECT_THAT(PrometheusTextProblem(head + "a\n"), HasSubstr("line 3: a sample without a value"));
  EXPECT_THAT(PrometheusTextProblem(head + "a one\n"),
              HasSubstr("line 3: a sample without a value"));
  EXPECT_THAT(PrometheusTextProblem(head + "a 1\n" + head),
              HasSubstr("line 4: a family printed twice"));
  EXPECT_THAT(PrometheusTextProblem(head + "# another comment\n"),
              HasSubstr("line 3: a comment that is neither HELP nor TYPE"));
  EXPECT_THAT(PrometheusTextProblem(head + "a 1\n\n"), HasSubstr("line 4: a blank line"));
  EXPECT_THAT(PrometheusTextProblem("# HELP a x\n# TYPE a summary\n"),
              HasSubstr("line 2: not a type kvtier prints"));
  EXPECT_THAT(PrometheusTextProblem("# HELP 1a x\n# TYPE 1a gauge\n"),
              HasSubstr("line 1: not a metric name"));
  EXPECT_EQ(PrometheusTextProblem(head + "a 1"), "the text does not end in a newline");
  EXPECT_EQ(PrometheusTextProblem(""), "no metric family");
  EXPECT_FALSE(WellFormedPrometheus("# TYPE a gauge\na 1\n"));
}

}  // namespace
}  // namespace kvtier
