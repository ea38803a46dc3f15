// gmock matchers for Status and Result<T>:
//   EXPECT_THAT(s, IsOk());
//   EXPECT_THAT(r, StatusIs(StatusCode::kCorruption));
//   EXPECT_THAT(r, StatusIs(StatusCode::kIOError, HasSubstr("rename")));
#ifndef KVTIER_TESTING_STATUS_MATCHERS_H_
#define KVTIER_TESTING_STATUS_MATCHERS_H_

#include <gmock/gmock.h>

#include "kvtier/status.h"

namespace kvtier::testing {

inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
Status GetStatus(const Result<T>& r) {
  return r.status();
}

MATCHER(IsOk, "is OK") {
  Status s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s.ToString();
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + std::string(StatusCodeName(code))) {
  Status s = GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has status code " + std::string(StatusCodeName(code))) {
  Status s = GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, s.message(), result_listener);
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTING_STATUS_MATCHERS_H_
