#include "colo/core/json.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/test_support.h"

namespace colo {
namespace {

TEST(Json, ParseErrorNamesLineAndColumn) {
  auto r = parseJson("{\n  \"a\": 1,\n  \"b\": ]\n}", "x.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(r.error().file, "x.json");
  EXPECT_NE(r.error().message.find("line 3"), std::string::npos) << r.error().message;
}

TEST(Json, MissingEmptyAndDirectoryFilesAreRefused) {
  test::ScratchDir dir;
  auto missing = readJsonFile(dir.path("nope.json"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kIo);
  EXPECT_EQ(exitCodeFor(missing.error().code), 2);
  auto empty = readJsonFile(dir.write("empty.json", "  \n"));
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message.find("empty"), std::string::npos);
  auto folder = readJsonFile(dir.path(""));
  ASSERT_FALSE(folder);
}

TEST(Json, FormatTagIsCheckedStrictly) {
  EXPECT_EQ(readFormatTag(Json::parse(R"({"format": "colo.plan/1"})"), "f")->kind, "plan");
  EXPECT_EQ(readFormatTag(Json::parse(R"({"format": "colo.cluster/12"})"), "f")->version, 12);
  for (const char* bad : {R"({})", R"({"format": 3})", R"({"format": "plan/1"})", R"({"format": "colo.plan"})",
                          R"({"format": "colo.plan/x"})", R"([1, 2])"}) {
    auto r = readFormatTag(Json::parse(bad), "f.json");
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().file, "f.json");
    }
  }
}

TEST(Json, RequireFormatNamesKindAndVersion) {
  EXPECT_TRUE(requireFormat(Json::parse(R"({"format": "colo.plan/1"})"), "p.json", "plan", 1));
  auto kind = requireFormat(Json::parse(R"({"format": "colo.plan/1"})"), "p.json", "cluster", 1);
  ASSERT_FALSE(kind);
  EXPECT_EQ(kind.error().message, "expected a cluster (colo.cluster/1), got a colo.plan document");
  auto version = requireFormat(Json::parse(R"({"format": "colo.plan/2"})"), "p.json", "plan", 1);
  ASSERT_FALSE(version);
  EXPECT_EQ(version.error().message, "unsupported version 2 of colo.plan (this colo reads colo.plan/1)");
  EXPECT_EQ(version.error().path, "/format");
}

TEST(Json, AtomicWriteReplacesWholeFileAndLeavesNoTemporary) {
  test::ScratchDir dir;
  const auto file = dir.path("out.json");
  ASSERT_TRUE(writeJsonFileAtomic(file, Json{{"a", 1}}));
  ASSERT_TRUE(writeJsonFileAtomic(file, Json{{"b", 2}}));
  EXPECT_EQ(test::loadJson(file), (Json{{"b", 2}}));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path(""))) ++entries;
  EXPECT_EQ(entries, 1);
  EXPECT_FALSE(writeJsonFileAtomic(dir.path("no/such/folder/x.json"), Json{}));
}

TEST(Json, ErrorToStringNamesFilePathAndMessage) {
  const Error e = Error::badInput("must be positive, got -5", "m.json", "/hidden_size");
  EXPECT_EQ(e.toString(), "m.json: /hidden_size: must be positive, got -5");
  EXPECT_EQ(exitCodeFor(ErrorCode::kInternal), 1);
  EXPECT_EQ(exitCodeFor(ErrorCode::kInfeasible), 3);
}

// The parser's explanation survives, with what it read last, on one line (once "last read: '..."
// was cut at its last ": " and gave "N'").
TEST(Json, SyntaxErrorsKeepTheExplanationAndWhatWasReadLast) {
  struct Case {
    std::string text, expected;
  };
  for (const auto& c : std::vector<Case>{
           {R"({"format":"colo.model/1","dropout": NaN})",
            "m.json: invalid JSON at line 1, column 37: syntax error while parsing value - invalid literal (after \"dropout\": N)"},
           {"{'a': 1}",
            "m.json: invalid JSON at line 1, column 2: syntax error while parsing object key - invalid literal; expected string "
            "literal (after {')"},
           {"tru", "m.json: invalid JSON at line 1, column 3: syntax error while parsing value - invalid literal (after tru)"},
           // A quote and a semicolon inside what was read are not the end of it.
           {"{\"name\": \"it'; x",
            "m.json: invalid JSON at line 1, column 16: syntax error while parsing value - invalid string: missing closing quote "
            "(after \"it'; x)"},
           {"{\"a\": [1, 2,, 3]}",
            "m.json: invalid JSON at line 1, column 13: syntax error while parsing value - unexpected ','; expected '[', '{', or a literal"},
       }) {
    auto r = parseJson(c.text, "m.json");
    ASSERT_FALSE(r) << c.text;
    EXPECT_EQ(r.error().toString(), c.expected) << c.text;
  }
}

TEST(Json, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  auto r = parseJson(deep, "deep.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().toString(), "deep.json: invalid JSON at line 1, column 257: nested deeper than 256 levels");
  // Brackets inside strings do not count.
  EXPECT_TRUE(parseJson("{\"a\": \"" + std::string(1000, '[') + "\"}", "s.json"));
  EXPECT_TRUE(parseJson(std::string(256, '[') + std::string(256, ']'), "ok.json"));
}

TEST(Json, NumberOverflowIsTheFilesFaultNotACrash) {
  auto r = parseJson("{\"num_layers\": 1e999}", "m.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(exitCodeFor(r.error().code), 2);
  EXPECT_EQ(r.error().toString(), "m.json: invalid JSON: number overflow parsing '1e999'");
}

TEST(Json, DescribingInvalidUtf8DoesNotThrow) {
  const Json value = std::string("\xff\xfe");
  EXPECT_NO_THROW((void)describeJsonValue(value));
}

}  // namespace
}  // namespace colo
