#include "core/json_strict.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace kvtier::internal {
namespace {

using namespace std::string_literals;

struct Case {
  std::string text;
  bool ok;
  JsonErrorKind kind = JsonErrorKind::kSyntax;
};

TEST(JsonStrictTest, AcceptsAndRejects) {
  const std::vector<Case> cases = {
      {R"({})", true},
      {R"([])", true},
      {R"( {"a" : [1, -2, 3.5, 1e9, 0.5E-3, true, false, null, "x"]} )", true},
      {"\t\r\n{}\n", true},
      {R"({"a":{"b":"c"},"b":{"b":"c"}})", true},  // same key in sibling objects is fine
      {R"("\u00e9\ud83d\ude00\/\b\f\n\r\t\"\\")", true},
      {"", false},
      {"   ", false},
      {"{", false},
      {R"({"a":1)", false},
      {R"({"a" 1})", false},
      {R"({"a":1,})", false},
      {R"([1,])", false},
      {R"([1 2])", false},
      {R"({a:1})", false},
      {R"({'a':1})", false},
      {R"([01])", false},
      {R"([1.])", false},
      {R"([.5])", false},
      {R"([1e])", false},
      {R"([+1])", false},
      {R"([-])", false},
      {R"([NaN])", false},
      {R"([Infinity])", false},
      {R"([tru])", false},
      {R"(["abc)", false},
      {"[\"a\x01b\"]", false},  // raw control character in a string
      {R"(["\x41"])", false},
      {R"(["\u12"])", false},
      {R"(["\u12G4"])", false},
      {R"(["\ud800"])", false},        // lone high surrogate
      {R"(["\udc00"])", false},        // lone low surrogate
      {R"(["\ud800\u0041"])", false},  // high surrogate + non-surrogate
      {R"({} x)", false, JsonErrorKind::kTrailing},
      {R"({}{})", false, JsonErrorKind::kTrailing},
      {R"(1 2)", false, JsonErrorKind::kTrailing},
      {R"({"a":1,"a":2})", false, JsonErrorKind::kDuplicateKey},
      {R"({"x":{"a":1,"b":2,"a":3}})", false, JsonErrorKind::kDuplicateKey},
      {R"([{"k":[{"q":1,"q":1}]}])", false, JsonErrorKind::kDuplicateKey},
      {R"({"\u0061":1,"a":2})", false, JsonErrorKind::kDuplicateKey},  // equal once decoded
      {R"(["a\u0000b"])", false, JsonErrorKind::kNul},
      {R"({"a\u0000":1})", false, JsonErrorKind::kNul},
  };
  for (const Case& c : cases) {
    JsonDocument doc;
    JsonError err;
    bool ok = doc.Parse(c.text, 8, &err);
    EXPECT_EQ(ok, c.ok) << c.text << " -> " << err.message;
    if (!ok && !c.ok) {
      EXPECT_EQ(err.kind, c.kind) << c.text << " -> " << err.message;
    }
  }
}

TEST(JsonStrictTest, DepthLimitCountsContainers) {
  JsonDocument doc;
  JsonError err;
  EXPECT_TRUE(doc.Parse("[[[1]]]", 3, &err));
  EXPECT_FALSE(doc.Parse("[[[[1]]]]", 3, &err));
  EXPECT_EQ(err.kind, JsonErrorKind::kTooDeep);
  EXPECT_FALSE(doc.Parse(R"({"a":{"b":{"c":{}}}})", 3, &err));
  EXPECT_EQ(err.kind, JsonErrorKind::kTooDeep);
  // Deep input must not recurse past the limit: a long run of '[' is cheap.
  EXPECT_FALSE(doc.Parse(std::string(1 << 20, '['), 4, &err));
  EXPECT_EQ(err.kind, JsonErrorKind::kTooDeep);
}

TEST(JsonStrictTest, TapeShapeAndDecodedStrings) {
  JsonDocument doc;
  JsonError err;
  ASSERT_TRUE(doc.Parse(R"({"a":[1,{"b":"x\ty"}],"c\u00e9":"\ud83d\ude00","d":[]})", 8, &err))
      << err.message;
  const JsonNode& root = doc.root();
  EXPECT_EQ(root.kind, JsonKind::kObject);
  EXPECT_EQ(root.count, 3u);
  EXPECT_EQ(root.end, doc.node_count());
  std::vector<std::string> keys, values;
  for (auto [k, v] : JsonMembers(doc, 0)) {
    keys.emplace_back(doc.node(k).text);
    if (doc.node(v).kind == JsonKind::kString) values.emplace_back(doc.node(v).text);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "c\xc3\xa9", "d"}));
  EXPECT_EQ(values, (std::vector<std::string>{"\xf0\x9f\x98\x80"}));
  // "a": [1, {"b": "x\ty"}]
  uint32_t a = 2;
  ASSERT_EQ(doc.node(a).kind, JsonKind::kArray);
  EXPECT_EQ(doc.node(a).count, 2u);
  std::vector<JsonKind> kinds;
  for (uint32_t e : JsonElements(doc, a)) kinds.push_back(doc.node(e).kind);
  EXPECT_EQ(kinds, (std::vector<JsonKind>{JsonKind::kNumber, JsonKind::kObject}));
  EXPECT_EQ(doc.node(a + 1).text, "1");
  EXPECT_EQ(doc.node(a + 4).text, "x\ty");
}

TEST(JsonStrictTest, ManyEscapedStringsKeepTheirViews) {
  // Decoded strings share one arena; growing it must not move earlier ones.
  std::string text = "[";
  for (int i = 0; i < 2000; ++i) {
    if (i > 0) text += ",";
    text += "\"\\u0041" + std::to_string(i) + "\"";
  }
  text += "]";
  JsonDocument doc;
  JsonError err;
  ASSERT_TRUE(doc.Parse(text, 2, &err)) << err.message;
  int i = 0;
  for (uint32_t e : JsonElements(doc, 0)) {
    EXPECT_EQ(doc.node(e).text, "A" + std::to_string(i));
    ++i;
  }
  EXPECT_EQ(i, 2000);
}

// What option, config and layout readers check before nlohmann reads the
// text (issue 33 item 6): 100,000 levels stop at the limit, with the offset.
TEST(JsonStrictTest, CheckUserJsonLimitsDepthAndRepeatsAndUtf8) {
  EXPECT_EQ(CheckUserJson(R"({"a": [1, {"b": [[]]}], "c": "d"})"), std::nullopt);
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  std::optional<JsonError> e = CheckUserJson(deep);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, JsonErrorKind::kTooDeep);
  EXPECT_EQ(e->offset, size_t{kMaxUserJsonDepth});  // the first '[' past the limit
  EXPECT_EQ(DescribeJsonError(*e), "nested deeper than 32 levels at byte 32");
  EXPECT_EQ(CheckUserJson(std::string(32, '[') + std::string(32, ']')), std::nullopt);

  e = CheckUserJson(R"({"x": {"a": 1, "a": 2}})");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, JsonErrorKind::kDuplicateKey);
  EXPECT_EQ(DescribeJsonError(*e), "duplicate key \"a\" in an object at byte 6");

  e = CheckUserJson("{\"a\": \"\xff\"}");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(DescribeJsonError(*e), "not UTF-8 at byte 7");
  e = CheckUserJson("{\"a\": 1,}");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, JsonErrorKind::kSyntax);
}

TEST(JsonStrictTest, Uint64) {
  auto num = [](std::string_view t) { return JsonNode{JsonKind::kNumber, 0, 1, t}; };
  EXPECT_EQ(JsonUint64(num("0")), 0u);
  EXPECT_EQ(JsonUint64(num("18446744073709551615")), UINT64_MAX);
  EXPECT_EQ(JsonUint64(num("18446744073709551616")), std::nullopt);
  EXPECT_EQ(JsonUint64(num("99999999999999999999")), std::nullopt);
  EXPECT_EQ(JsonUint64(num("-1")), std::nullopt);
  EXPECT_EQ(JsonUint64(num("-0")), std::nullopt);
  EXPECT_EQ(JsonUint64(num("1.0")), std::nullopt);
  EXPECT_EQ(JsonUint64(num("1e3")), std::nullopt);
  EXPECT_EQ(JsonUint64(JsonNode{JsonKind::kString, 0, 1, "5"}), std::nullopt);
}

TEST(JsonStrictTest, Utf8Validation) {
  struct U {
    std::string bytes;
    bool ok;
    size_t bad = 0;
  };
  const std::vector<U> cases = {
      {"plain ascii", true},
      {"caf\xc3\xa9", true},
      {"\xe2\x82\xac", true},      // U+20AC
      {"\xf0\x9f\x98\x80", true},  // U+1F600
      {"\xf4\x8f\xbf\xbf", true},  // U+10FFFF
      {"\xed\x9f\xbf", true},      // U+D7FF
      {"\xee\x80\x80", true},      // U+E000
      {"0123456789abcdef\xff", false, 16},
      {"\x80", false, 0},              // lone continuation
      {"\xc0\xaf", false, 0},          // overlong '/'
      {"\xc1\xbf", false, 0},          // overlong
      {"\xe0\x80\xaf", false, 0},      // overlong 3-byte
      {"\xf0\x80\x80\xaf", false, 0},  // overlong 4-byte
      {"ab\xed\xa0\x80", false, 2},    // U+D800
      {"\xed\xbf\xbf", false, 0},      // U+DFFF
      {"\xf4\x90\x80\x80", false, 0},  // U+110000
      {"\xf5\x80\x80\x80", false, 0},
      {"x\xe2\x82", false, 1},  // truncated
      {"\xc3", false, 0},
      {"\xc3\x28", false, 0},  // bad continuation
  };
  for (const U& u : cases) {
    size_t bad = 12345;
    EXPECT_EQ(IsStrictUtf8(u.bytes, &bad), u.ok) << ::testing::PrintToString(u.bytes);
    if (!u.ok) {
      EXPECT_EQ(bad, u.bad) << ::testing::PrintToString(u.bytes);
    }
  }
}

TEST(JsonStrictTest, AppendJsonStringRoundTrips) {
  const std::string raw = "q\"b\\s/\n\r\t\b\f\x01\x1f caf\xc3\xa9";
  std::string out;
  AppendJsonString(raw, &out);
  EXPECT_EQ(out, "\"q\\\"b\\\\s/\\n\\r\\t\\b\\f\\u0001\\u001f caf\xc3\xa9\"");
  JsonDocument doc;
  JsonError err;
  ASSERT_TRUE(doc.Parse(out, 1, &err)) << err.message;
  EXPECT_EQ(doc.root().text, raw);
}

}  // namespace
}  // namespace kvtier::internal
