#include "core/text.h"

#include <gtest/gtest.h>

namespace gpuslice {
namespace {

TEST(Utf8, ValidTextPassesThroughUnchanged) {
  for (const char* s : {"", "plain", "caf\xc3\xa9", "\xe2\x82\xac 5", "\xf0\x9f\x98\x80",
                        "\xef\xbf\xbd", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(EscapeInvalidUtf8(s), s);
  }
}

TEST(Utf8, InvalidBytesAreEscapedOneByOne) {
  struct Case { std::string in, want; };
  for (const Case& c : {Case{"\xff", "\\xff"},
                        {"a\xff" "b", "a\\xffb"},
                        {"0.5\xc3", "0.5\\xc3"},                 // truncated sequence
                        {"\xc0\xaf", "\\xc0\\xaf"},              // overlong '/'
                        {"\xed\xa0\x80", "\\xed\\xa0\\x80"},     // surrogate U+D800
                        {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // above U+10FFFF
                        {"\xe2\x82", "\\xe2\\x82"},
                        {"\x80" "caf\xc3\xa9", "\\x80caf\xc3\xa9"}}) {
    EXPECT_FALSE(IsValidUtf8(c.in));
    const std::string out = EscapeInvalidUtf8(c.in);
    EXPECT_EQ(out, c.want);
    EXPECT_TRUE(IsValidUtf8(out));
  }
}

TEST(ForTerminal, NeutralisesEveryControlCharacter) {
  EXPECT_EQ(ForTerminal("python train.py"), "python train.py");
  EXPECT_EQ(ForTerminal("a\nb"), "a\\nb");
  EXPECT_EQ(ForTerminal("\x1b[31mred\x1b]0;title\x07"), "\\e[31mred\\e]0;title\\x07");
  EXPECT_EQ(ForTerminal("x\ry\tz\x7f"), "x\\ry\\tz\\x7f");
  EXPECT_EQ(ForTerminal("\xc2\x9b" "2J"), "\\u009b2J");       // C1 CSI
  EXPECT_EQ(ForTerminal("caf\xc3\xa9 \xff"), "caf\xc3\xa9 \\xff");
  for (int c = 0; c < 0x20; ++c) {
    const std::string out = ForTerminal(std::string(1, static_cast<char>(c)));
    for (char o : out) EXPECT_GE(static_cast<unsigned char>(o), 0x20) << c;
  }
}

TEST(ForTerminal, ShowsInvisibleAndDirectionFormattingCharactersAsEscapes) {
  // A right-to-left override makes "#\u202egpj.tac" read as "#cat.jpg"; zero-width and isolate
  // characters hide or reorder text in others' views.
  EXPECT_EQ(ForTerminal("rm -rf ~ #\xe2\x80\xae" "gpj.tac"), "rm -rf ~ #\\u202egpj.tac");
  EXPECT_EQ(ForTerminal("a\xe2\x80\x8b" "b\xe2\x81\xa6" "c\xe2\x81\xa9"), "a\\u200bb\\u2066c\\u2069");
  EXPECT_EQ(ForTerminal("\xef\xbb\xbf" "x\xc2\xad" "y"), "\\ufeffx\\u00ady");
  EXPECT_EQ(ForTerminal("tag\xf3\xa0\x80\x81"), "tag\\U000e0001");
  EXPECT_EQ(ForTerminal("line\xe2\x80\xa8sep"), "line\\u2028sep");
  // Ordinary text, accents, CJK, emoji stay as they are.
  EXPECT_EQ(ForTerminal("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80");
  for (char32_t cp : {0x202Au, 0x202Bu, 0x202Cu, 0x202Du, 0x202Eu, 0x2066u, 0x2067u, 0x2068u, 0x2069u, 0x200Eu, 0x200Fu,
                      0x061Cu}) {
    EXPECT_TRUE(IsInvisibleFormat(cp)) << std::hex << static_cast<unsigned>(cp);
  }
  EXPECT_FALSE(IsInvisibleFormat(U'a'));
  EXPECT_FALSE(IsInvisibleFormat(0x00E9));
}

TEST(Base64, RoundTripsEveryLengthAndAllByteValues) {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  for (std::size_t n = 0; n <= all.size(); n += (n < 8 ? 1 : 37)) {
    const std::string in = all.substr(0, n);
    std::string out;
    ASSERT_TRUE(Base64Decode(Base64Encode(in), &out)) << n;
    EXPECT_EQ(out, in) << n;
  }
  EXPECT_EQ(Base64Encode("\xff"), "/w==");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
}

TEST(Base64, RejectsMalformedText) {
  std::string out;
  for (const char* bad : {"a", "abc", "ab=c", "a===", "====", "ab\n=", "Zm9v!mFy", "/x==",
                          "Zm9=YmFy"}) {
    EXPECT_FALSE(Base64Decode(bad, &out)) << bad;
  }
}

}  // namespace
}  // namespace gpuslice
