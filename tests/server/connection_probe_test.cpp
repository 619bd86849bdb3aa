// ConnectionProbe on real loopback connections: an open connection is there, one the client
// closed (FIN) or reset (RST) is gone — also when the reset came before the probe's first look,
// when the socket no longer has a peer address to be found by (the server tests' hang-ups
// raced into that case under load and left requests running).
#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace hibana::server {
namespace {

// A listening socket, one accepted connection (the server's end, kept open like a handler's)
// and the client's end, all on 127.0.0.1.
struct Loopback {
  int listener = -1, server = -1, client = -1;
  int server_port = 0, client_port = 0;
  Loopback() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(listener, 4), 0);
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    server_port = ntohs(addr.sin_port);
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    server = accept(listener, nullptr, nullptr);
    sockaddr_in mine{};
    len = sizeof(mine);
    getsockname(client, reinterpret_cast<sockaddr*>(&mine), &len);
    client_port = ntohs(mine.sin_port);
  }
  ~Loopback() {
    for (int fd : {listener, server, client}) {
      if (fd >= 0) close(fd);
    }
  }
  ConnectionProbe probe() const {
    return ConnectionProbe("127.0.0.1", server_port, "127.0.0.1", client_port);
  }
  // Closes the client's end, with a reset (SO_LINGER 0) or an orderly FIN, and waits until the
  // server's end has seen it.
  void hang_up(bool reset) {
    if (reset) {
      linger l{1, 0};
      setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(client);
    client = -1;
    pollfd p{server, POLLIN | POLLRDHUP, 0};
    poll(&p, 1, 2000);
  }
};

TEST(ConnectionProbe, AnOpenConnectionIsThere) {
  Loopback c;
  ConnectionProbe p = c.probe();
  EXPECT_FALSE(p.closed());
  EXPECT_FALSE(p.closed());
}

TEST(ConnectionProbe, AClosedConnectionIsGone) {
  Loopback c;
  ConnectionProbe p = c.probe();
  EXPECT_FALSE(p.closed());  // found while open
  c.hang_up(false);
  EXPECT_TRUE(p.closed());
}

TEST(ConnectionProbe, AConnectionResetBeforeTheFirstLookIsGone) {
  Loopback c;
  c.hang_up(true);
  ConnectionProbe p = c.probe();
  EXPECT_TRUE(p.closed());
}

TEST(ConnectionProbe, AnotherResetConnectionDoesNotTouchAnOpenOne) {
  Loopback c;
  // A second client of the same listener (the same local endpoint), reset.
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(c.server_port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  const int other = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(other, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int other_server = accept(c.listener, nullptr, nullptr);
  linger l{1, 0};
  setsockopt(other, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(other);
  pollfd p{other_server, POLLIN | POLLRDHUP, 0};
  poll(&p, 1, 2000);
  ConnectionProbe probe = c.probe();
  EXPECT_FALSE(probe.closed());
  close(other_server);
}

}  // namespace
}  // namespace hibana::server
