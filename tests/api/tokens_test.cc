// The TCP token file: named identities, read-only tokens, never implicitly root, and the
// file's own safety (mode, owner); errors name the line, never the token.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "api/tokens.h"

namespace gpuslice::api {
namespace {

constexpr const char* kT1 = "0123456789abcdef-one";
constexpr const char* kT2 = "0123456789abcdef-two";
constexpr const char* kT3 = "0123456789abcdef-three";

Result<std::vector<TcpIdentity>> Parse(const std::string& text, std::int64_t owner = 0) {
  return ParseTokenFile(text, "/etc/gpuslice/tokens", owner, owner);
}

TEST(TokenFile, LinesMapTokensToNamedIdentities) {
  auto r = Parse(std::string("# who uid token\n\nnobody 65534 ") + kT1 + "  # a comment\n" +
                 "prom read-only " + kT2 + "\r\n" + "ops 0 " + kT3 + "\n" +
                 "svc 4242:4343 0123456789abcdef-four\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].name, "nobody");
  EXPECT_EQ((*r)[0].uid, 65534);
  EXPECT_EQ((*r)[0].token, kT1);
  EXPECT_FALSE((*r)[0].read_only);
  EXPECT_TRUE((*r)[1].read_only);
  EXPECT_EQ((*r)[1].uid, -1);
  EXPECT_EQ((*r)[2].uid, 0) << "root only because the line says 0";
  EXPECT_EQ((*r)[3].uid, 4242);
  EXPECT_EQ((*r)[3].gid, 4343);
}

TEST(TokenFile, ABareTokenIsNeverImplicitlyRoot) {
  auto root = Parse(std::string(kT1) + "\n", 0);
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("root"), std::string::npos);
  EXPECT_EQ(root.status().message().find(kT1), std::string::npos) << "never echoes a token";
  // The old format still works where it was safe: a user's own file acts as that user.
  auto mine = Parse(std::string(kT1) + "\n", 4242);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ((*mine)[0].uid, 4242);
}

TEST(TokenFile, BadLinesNameTheLineAndNeverTheToken) {
  struct Case {
    std::string text;
    std::int64_t owner;
    std::string says;
  };
  for (const auto& c : std::vector<Case>{
           {"a 1:1 short\n", 0, "line 1: the token has 5 characters"},
           {"a x " + std::string(kT1) + "\n", 0, "uid 'x'"},
           {"a -1:1 " + std::string(kT1) + "\n", 0, "uid '-1:1'"},
           {"a 4294967295:1 " + std::string(kT1) + "\n", 0, "uid '4294967295:1'"},
           {"a 5:1 " + std::string(kT1) + " extra\n", 0, "found 4 fields"},
           {"root 5:5 " + std::string(kT1) + "\n", 0, "'root' is uid 0"},
           {"a 5:5 " + std::string(kT1) + "\nb 6:6 " + kT1 + "\n", 0, "line 2: this token is"},
           {"a 5:5 " + std::string(kT1) + "\na 6:6 " + kT2 + "\n", 0, "name 'a' given twice"},
           {"a 5:5 " + std::string(kT1) + "\n", 7, "belongs to uid 7"},
           {"a 2000000:2000000 " + std::string(kT1) + "\nb 2000001 " + kT2 + "\n", 0,
            "line 2: uid 2000001 is not in the passwd database"},
           {std::string(kT1) + "\nb 5:5 " + kT2 + "\n", 5, "old one-token format"},
           {"# only a comment\n", 0, "no token"},
       }) {
    auto r = Parse(c.text, c.owner);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.text << " -> " << r.status().message();
    for (const char* t : {kT1, kT2}) {
      EXPECT_EQ(r.status().message().find(t), std::string::npos) << r.status().message();
    }
  }
}

TEST(TokenFile, TheFileMustBePrivate) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("tokens_test_" + std::to_string(getpid()))).string();
  std::ofstream(path) << "nobody 65534 " << kT1 << "\n";
  chmod(path.c_str(), 0644);
  auto r = LoadTokenFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("chmod 600"), std::string::npos);
  chmod(path.c_str(), 0600);
  r = LoadTokenFile(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].uid, 65534);
  std::filesystem::remove(path);
  EXPECT_FALSE(LoadTokenFile(path).ok());
  EXPECT_FALSE(LoadTokenFile(std::filesystem::temp_directory_path().string()).ok());
}

}  // namespace
}  // namespace gpuslice::api
