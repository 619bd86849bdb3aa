#include "parallel/node_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hibana {

namespace {
constexpr char kGoodbye = 'B';
}

NodeWatch::NodeWatch(std::vector<int> connections, std::vector<std::string> names, Lost lost)
    : fds_(std::move(connections)), names_(std::move(names)), lost_(std::move(lost)) {
  const bool named = names_.size() == fds_.size();
  if (!named || ::pipe2(stop_, O_CLOEXEC) != 0) {
    const std::string why = named ? std::string("pipe: ") + std::strerror(errno)
                                  : std::string("one name per connection");
    for (int fd : fds_) ::close(fd);
    throw Error(named ? ErrorKind::io : ErrorKind::internal, "NodeWatch: " + why);
  }
  thread_ = std::thread([this] { watch(); });
}

void NodeWatch::say_goodbye() {
  for (int fd : fds_) ::send(fd, &kGoodbye, 1, MSG_NOSIGNAL);  // a peer already gone: no matter
}

NodeWatch::~NodeWatch() {
  const char stop = 1;
  while (::write(stop_[1], &stop, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  for (int fd : fds_) ::close(fd);
  ::close(stop_[0]);
  ::close(stop_[1]);
}

void NodeWatch::watch() {
  std::vector<bool> done(fds_.size(), false);  // said goodbye
  for (;;) {
    std::vector<pollfd> p{{stop_[0], POLLIN, 0}};
    std::vector<size_t> which;
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (done[i]) continue;
      p.push_back({fds_[i], POLLIN, 0});
      which.push_back(i);
    }
    if (::poll(p.data(), p.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;  // cannot watch: nothing to do but carry on unwatched
    }
    if (p[0].revents) return;  // stopping
    for (size_t k = 1; k < p.size(); ++k) {
      if (!p[k].revents) continue;
      const size_t i = which[k - 1];
      char b = 0;
      const ssize_t n = ::recv(fds_[i], &b, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 1 && b == kGoodbye) {
        done[i] = true;
        continue;
      }
      lost_(names_[i] + " ended without a goodbye (" +
            (n == 0  ? std::string("its connection closed")
             : n < 0 ? std::string(std::strerror(errno))
                     : std::string("it sent something else")) +
            "): its ranks are gone, so this node's ranks end too");
      return;
    }
  }
}

}  // namespace hibana
