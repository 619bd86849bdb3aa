#include "server/connection_probe.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace hibana::server {

namespace {

// The numeric host and port of an address, formatted as cpp-httplib formats them.
bool endpoint(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), s, sizeof(s),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  host = h;
  port = std::atoi(s);
  return true;
}

}  // namespace

ConnectionProbe::ConnectionProbe(std::string local_addr, int local_port, std::string remote_addr,
                                 int remote_port)
    : local_addr_(std::move(local_addr)),
      remote_addr_(std::move(remote_addr)),
      local_port_(local_port),
      remote_port_(remote_port) {}

int ConnectionProbe::find_socket(bool& peer_lost) const {
  peer_lost = false;
  if (remote_port_ <= 0 || local_port_ <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < 0 || fd == dirfd(dir)) continue;
    const int s = static_cast<int>(fd);
    struct stat st {};
    if (fstat(s, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
    std::string ph, lh;
    int pp = 0, lp = 0;
    if (getsockname(s, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        !endpoint(local, local_len, lh, lp) || lp != local_port_ || lh != local_addr_) {
      continue;
    }
    if (getpeername(s, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      // A connection on our local endpoint without a peer: reset (a listening socket has no
      // peer either, and is told apart by SO_ACCEPTCONN).
      int listening = 0;
      socklen_t len = sizeof(listening);
      if (errno == ENOTCONN && getsockopt(s, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 &&
          !listening) {
        peer_lost = true;
      }
      continue;
    }
    if (endpoint(peer, peer_len, ph, pp) && pp == remote_port_ && ph == remote_addr_) {
      found = s;
      break;
    }
  }
  closedir(dir);
  if (found >= 0) peer_lost = false;
  return found;
}

bool ConnectionProbe::closed() {
  if (closed_) return true;
  if (fd_ == -2) {
    // The connection's socket is open while its handler runs. Not among the connected sockets
    // but beside one on our endpoint that lost its peer: ours, reset before this first look
    // (a reset socket has no peer address to be found by).
    bool peer_lost = false;
    fd_ = find_socket(peer_lost);
    if (fd_ < 0 && peer_lost) closed_ = true;
  }
  if (fd_ < 0) return closed_;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
    closed_ = true;
  } else if (p.revents & POLLIN) {
    char c;
    ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    closed_ = n == 0;  // > 0: the client pipelined another request; it is still there
  }
  return closed_;
}

}  // namespace hibana::server
