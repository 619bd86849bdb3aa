// NodeWatch (parallel/node_watch.h): a node that ends without a goodbye ends the others.
#include "parallel/node_watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>

#include "parallel/rendezvous.h"

namespace hibana {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;

// Records the first `lost` call.
struct LostCalls {
  std::promise<std::string> first;
  std::future<std::string> seen = first.get_future();
  int calls = 0;
  NodeWatch::Lost callback() {
    return [this](const std::string& why) {
      if (calls++ == 0) first.set_value(why);
    };
  }
};

std::pair<int, int> socket_pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  return {fds[0], fds[1]};
}

TEST(NodeWatch, APeerThatEndsWithoutAGoodbyeIsLost) {
  auto [mine, theirs] = socket_pair();
  LostCalls lost;
  NodeWatch watch({mine}, {"node 2"}, lost.callback());
  ::close(theirs);
  ASSERT_EQ(lost.seen.wait_for(5s), std::future_status::ready);
  EXPECT_THAT(lost.seen.get(), HasSubstr("node 2 ended without a goodbye (its connection closed)"));
}

TEST(NodeWatch, APeerThatSaysGoodbyeIsNotLost) {
  auto [a, b] = socket_pair();
  LostCalls lost_a, lost_b;
  auto watch_a = std::make_unique<NodeWatch>(std::vector<int>{a}, std::vector<std::string>{"b"},
                                             lost_a.callback());
  {
    NodeWatch watch_b({b}, {"a"}, lost_b.callback());
    watch_b.say_goodbye();
  }  // b's end closes
  EXPECT_EQ(lost_a.seen.wait_for(300ms), std::future_status::timeout);
  watch_a.reset();
  EXPECT_EQ(lost_a.calls, 0);
  EXPECT_EQ(lost_b.calls, 0);
}

TEST(NodeWatch, NodeZeroEndingEndsTheNodesThatJoinedIt) {
  NodeGroup g;
  g.nnodes = 3;
  g.ranks = 3;
  g.master = {"127.0.0.1", 0};
  RendezvousMaster master(g);
  auto join = [&](int node_rank) {
    return std::async(std::launch::async, [g, node_rank, port = master.port()]() mutable {
      g.node_rank = node_rank;
      g.master.port = port;
      int fd = -1;
      rendezvous_join(g, "", &fd);
      return fd;
    });
  };
  auto one = join(1), two = join(2);
  master.serve("id");
  LostCalls lost0, lost1, lost2;
  auto zero = std::make_unique<NodeWatch>(
      master.take_connections(), std::vector<std::string>{"node 1", "node 2"}, lost0.callback());
  NodeWatch watch1({one.get()}, {"node 0"}, lost1.callback());
  NodeWatch watch2({two.get()}, {"node 0"}, lost2.callback());
  zero.reset();  // node 0 ends without a goodbye
  for (LostCalls* l : {&lost1, &lost2}) {
    ASSERT_EQ(l->seen.wait_for(5s), std::future_status::ready);
    EXPECT_THAT(l->seen.get(), HasSubstr("node 0 ended without a goodbye"));
  }
  EXPECT_EQ(lost0.calls, 0);
}

}  // namespace
}  // namespace hibana
