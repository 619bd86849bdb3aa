// The per-request parts of Claude Code's billing line are removed, and nothing else changes.
#include <gtest/gtest.h>

#include "server/billing_header.h"

namespace hibana::server {
namespace {

TEST(BillingHeader, StripsTheNonceAndTheVersionSuffix) {
  EXPECT_EQ(
      normalize_billing_header(
          "x-anthropic-billing-header: cc_version=2.1.197.3d9; cc_entrypoint=cli; cch=eb6c6;"),
      "x-anthropic-billing-header: cc_version=2.1.197; cc_entrypoint=cli;");
  EXPECT_EQ(
      normalize_billing_header(
          "x-anthropic-billing-header: cc_version=2.1.177.01c; cc_entrypoint=sdk-cli; cch=36ee5;"),
      "x-anthropic-billing-header: cc_version=2.1.177; cc_entrypoint=sdk-cli;");
}

TEST(BillingHeader, TwoRequestsOfOneSessionBecomeIdentical) {
  const std::string a = normalize_billing_header(
      "x-anthropic-billing-header: cc_version=2.1.84.c8e; cc_entrypoint=cli; cch=00001;\nYou are");
  const std::string b = normalize_billing_header(
      "x-anthropic-billing-header: cc_version=2.1.84.76b; cc_entrypoint=cli; cch=fffff;\nYou are");
  EXPECT_EQ(a, b);
}

TEST(BillingHeader, LeavesOtherTextAlone) {
  for (std::string s : {"", "You are Claude Code.", "cch=12345; not a header",
                        "say x-anthropic-billing-header: cch=1; mid-line"}) {
    EXPECT_EQ(normalize_billing_header(s), s);
  }
  EXPECT_EQ(normalize_billing_header(
                "line one\nx-anthropic-billing-header: cch=abcde; extra=1;\nline three"),
            "line one\nx-anthropic-billing-header: extra=1;\nline three");
}

TEST(BillingHeader, KeepsUnknownFieldsAndAVersionWithoutSuffix) {
  EXPECT_EQ(normalize_billing_header("x-anthropic-billing-header: cc_version=3.0.0; foo=bar;"),
            "x-anthropic-billing-header: cc_version=3.0.0; foo=bar;");
}

}  // namespace
}  // namespace hibana::server
