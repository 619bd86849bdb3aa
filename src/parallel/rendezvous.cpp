// The rendezvous of the nodes of a run across hosts: rendezvous.h has the wire format.
#include "parallel/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/error.h"
#include "core/log.h"

namespace hibana {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'h', 'i', 'b', 'a', 'n', 'a', 'R', 'Z'};
constexpr size_t kHelloBytes = 40;
constexpr size_t kReplyBytes = 16;
constexpr size_t kMaxPending = 64;  // connections that have not said hello yet

// Closes a socket when it goes out of scope.
struct Socket {
  int fd = -1;
  explicit Socket(int f = -1) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

std::string seconds(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

void put32(std::string& s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xff));
}
void put64(std::string& s, uint64_t v) {
  put32(s, static_cast<uint32_t>(v >> 32));
  put32(s, static_cast<uint32_t>(v));
}
uint32_t get32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t get64(const char* p) {
  return (static_cast<uint64_t>(get32(p)) << 32) | get32(p + 4);
}

std::string encode_reply(uint32_t status, const std::string& bytes) {
  std::string s(kMagic, sizeof kMagic);
  put32(s, status);
  put32(s, static_cast<uint32_t>(bytes.size()));
  return s + bytes;
}

bool send_all(int fd, const std::string& data) {
  for (size_t at = 0; at < data.size();) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// Reads n bytes by the deadline: "" once read, else what went wrong ("timed out", "closed"...).
std::string recv_exact(int fd, char* buf, size_t n, Clock::time_point deadline) {
  for (size_t at = 0; at < n;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::strerror(errno);
    if (r == 0) return "timed out";
    const ssize_t got = ::recv(fd, buf + at, n - at, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::strerror(errno);
    if (got == 0) return "the connection closed";
    at += static_cast<size_t>(got);
  }
  return {};
}

std::string host_port(const MasterAddress& m) {
  const bool v6 = m.host.find(':') != std::string::npos;
  return (v6 ? "[" + m.host + "]" : m.host) + ":" + std::to_string(m.port);
}

std::string peer_name(const sockaddr_storage& a, socklen_t len) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, port,
                    sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown address";
  }
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos) h = h.substr(7);  // IPv4
  return h + " port " + port;
}

struct Hello {
  uint32_t version = 0, nnodes = 0, node_rank = 0, ranks = 0, status = 0;
  uint64_t fingerprint = 0;
  std::string message;
};

enum class Parsed { incomplete, garbage, hello };

// A hello from the bytes received so far; `why` says what is wrong with garbage.
Parsed parse_hello(const std::string& in, Hello& h, std::string& why) {
  const size_t head = std::min(in.size(), sizeof kMagic);
  if (std::memcmp(in.data(), kMagic, head) != 0) {
    why = "it does not speak hibana's rendezvous";
    return Parsed::garbage;
  }
  if (in.size() < kHelloBytes) return Parsed::incomplete;
  const char* p = in.data() + sizeof kMagic;
  h.version = get32(p);
  h.nnodes = get32(p + 4);
  h.node_rank = get32(p + 8);
  h.ranks = get32(p + 12);
  h.fingerprint = get64(p + 16);
  h.status = get32(p + 24);
  const uint32_t length = get32(p + 28);
  if (length > kRendezvousMaxBytes) {
    why = "it announced a message of " + std::to_string(length) + " bytes";
    return Parsed::garbage;
  }
  if (in.size() < kHelloBytes + length) return Parsed::incomplete;
  if (in.size() > kHelloBytes + length) {
    why = "it sent more than a hello";
    return Parsed::garbage;
  }
  h.message = in.substr(kHelloBytes, length);
  return Parsed::hello;
}

// Listens on `port` of every interface of `family`; -1 with `error` set when it cannot.
int listen_on(int family, int port, std::string& error) {
  Socket s(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  const int one = 1, zero = 0;
  ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage a{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    ::setsockopt(s.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 too
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_any;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof *in6;
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&a);
    in4->sin_family = AF_INET;
    in4->sin_addr.s_addr = htonl(INADDR_ANY);
    in4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof *in4;
  }
  if (::bind(s.fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(s.fd, 64) != 0) {
    error = std::strerror(errno);
    return -1;
  }
  const int fd = s.fd;
  s.fd = -1;
  return fd;
}

// A connected socket to `m` (any of its addresses), or -1 with `error` set.
int connect_to(const MasterAddress& m, Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(m.port);
  if (const int e = ::getaddrinfo(m.host.c_str(), port.c_str(), &hints, &found); e != 0) {
    error = std::string("cannot resolve '") + m.host + "': " + ::gai_strerror(e);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = found; ai && fd < 0; ai = ai->ai_next) {
    Socket s(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (s.fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        error = std::strerror(errno);
        continue;
      }
      pollfd p{s.fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, std::min(ms_left(deadline), 5000));
      int so_error = 0;
      socklen_t len = sizeof so_error;
      if (r <= 0 || ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error) {
        error = r == 0 ? "connecting timed out" : std::strerror(so_error ? so_error : errno);
        continue;
      }
    }
    ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL) & ~O_NONBLOCK);
    std::swap(fd, s.fd);
  }
  ::freeaddrinfo(found);
  return fd;
}

}  // namespace

MasterAddress parse_master_address(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorKind::invalid_argument, "--master '" + text + "' is not ADDR:PORT (" + why +
                                                  "; e.g. 10.0.0.1:29500 or [fd00::1]:29500)");
  };
  MasterAddress m;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw bad("an IPv6 address in brackets must be followed by :PORT");
    }
    m.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) throw bad("no :PORT");
    m.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (m.host.find(':') != std::string::npos) throw bad("write an IPv6 address in brackets");
  }
  if (m.host.empty()) throw bad("no address before the port");
  const bool digits =
      !port.empty() && port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
    throw bad("the port must be a number from 1 to 65535");
  }
  m.port = std::stoi(port);
  return m;
}

std::string node_group_error(int tp, int nnodes, int node_rank, const std::string& master,
                             bool cuda) {
  const std::string n = std::to_string(nnodes);
  if (nnodes < 1) return "--nnodes must be 1 or more";
  if (nnodes == 1) {
    if (node_rank != 0 || !master.empty()) {
      return "--node-rank and --master are for a run across hosts: give --nnodes N (N >= 2) too";
    }
    return {};
  }
  if (!cuda) {
    return "--nnodes " + n +
           " joins hosts through NCCL, which needs --device cuda; on the CPU, let Open MPI "
           "start the ranks on every host instead: `mpirun -H host1,host2 -np " +
           std::to_string(std::max(tp, nnodes)) + " hibana run --tp " +
           std::to_string(std::max(tp, nnodes)) +
           " ...` (the same hibana and model path on each host; no --nnodes)";
  }
  if (tp % nnodes != 0) {
    return "--tp " + std::to_string(tp) + " is the number of ranks over all nodes and every node " +
           "runs as many: it must be a multiple of --nnodes " + n;
  }
  if (node_rank < 0 || node_rank >= nnodes) {
    return "--node-rank " + std::to_string(node_rank) + " is out of range: --nnodes " + n +
           " numbers the nodes 0 to " + std::to_string(nnodes - 1);
  }
  if (master.empty()) {
    return "--nnodes " + n +
           " needs --master ADDR:PORT: node 0's address, which every node can reach, and a free "
           "port there";
  }
  try {
    parse_master_address(master);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

uint64_t arguments_fingerprint(const std::vector<std::string>& args) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64-bit
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // a separator no argument contains
  };
  static const char* kSkipped[] = {"--node-rank", "--master", "--threads", "--log-level"};
  for (size_t i = 1; i < args.size(); ++i) {
    bool skip = false;
    for (const char* name : kSkipped) {
      if (args[i] == name) {
        ++i;  // and its value
        skip = true;
        break;
      }
      if (args[i].rfind(std::string(name) + "=", 0) == 0) skip = true;
    }
    if (!skip) mix(args[i]);
  }
  return h;
}

std::vector<std::string> process_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find('\0', at);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  return args;
}

RendezvousMaster::RendezvousMaster(const NodeGroup& group) : group_(group) {
  check(group.nnodes >= 2 && group.node_rank == 0, ErrorKind::internal,
        "RendezvousMaster: node 0 of two or more");
  std::string error;
  listener_ = listen_on(AF_INET6, group.master.port, error);
  if (listener_ < 0 && error != std::strerror(EADDRINUSE)) {
    listener_ = listen_on(AF_INET, group.master.port, error);  // no IPv6 on this host
  }
  if (listener_ < 0) {
    throw Error(ErrorKind::io, "node 0 cannot listen on port " + std::to_string(group.master.port) +
                                   " for the other nodes (--master " + host_port(group.master) +
                                   "): " + error + "; choose another port");
  }
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

RendezvousMaster::~RendezvousMaster() {
  if (listener_ >= 0) ::close(listener_);
  for (int fd : connections_) ::close(fd);
}

void RendezvousMaster::serve(const std::string& payload) {
  check(payload.size() <= kRendezvousMaxBytes, ErrorKind::internal,
        "rendezvous payload over the limit");
  const auto deadline = Clock::now() + group_.timeout;
  struct Peer {
    Socket s;
    std::string who, in;
  };
  std::vector<Peer> pending;
  std::vector<Socket> nodes(static_cast<size_t>(group_.nnodes));
  int arrived = 0;
  std::string refusal;
  ErrorKind kind = ErrorKind::invalid_argument;
  auto check_hello = [&](const Hello& h) -> std::string {
    const std::string node = "node " + std::to_string(h.node_rank);
    if (h.version != kRendezvousVersion) {
      return node + " speaks rendezvous version " + std::to_string(h.version) +
             ", node 0 version " + std::to_string(kRendezvousVersion) +
             ": run the same hibana on every node";
    }
    if (static_cast<int>(h.nnodes) != group_.nnodes || static_cast<int>(h.ranks) != group_.ranks) {
      return node + " was started with --tp " + std::to_string(h.ranks) + " --nnodes " +
             std::to_string(h.nnodes) + ", node 0 with --tp " + std::to_string(group_.ranks) +
             " --nnodes " + std::to_string(group_.nnodes) +
             ": every node needs the same --tp and --nnodes";
    }
    if (h.node_rank < 1 || static_cast<int>(h.node_rank) >= group_.nnodes) {
      return "a node says it is --node-rank " + std::to_string(h.node_rank) + ", but node 0 is " +
             "--node-rank 0 and the others 1 to " + std::to_string(group_.nnodes - 1);
    }
    if (nodes[h.node_rank].fd >= 0) {
      return "two nodes were started with --node-rank " + std::to_string(h.node_rank);
    }
    if (h.fingerprint != group_.fingerprint) {
      return node + "'s command differs from node 0's: every argument but --node-rank, --master, " +
             "--threads and --log-level (the model, --tp, --device, --dtype...) must be the same " +
             "on every node";
    }
    if (h.status != 0) return node + " could not start its ranks: " + h.message;
    return {};
  };

  while (arrived < group_.nnodes - 1 && refusal.empty()) {
    const int left = ms_left(deadline);
    if (left == 0) {
      std::string missing;
      for (int r = 1; r < group_.nnodes; ++r) {
        if (nodes[r].fd < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      refusal = "node 0 waited " + seconds(group_.timeout) + " s on port " + std::to_string(port_) +
                " and node(s) " + missing + " of --nnodes " + std::to_string(group_.nnodes) +
                " never came: start them with the same --master, and check that they can reach "
                "node 0's host on that port";
      kind = ErrorKind::timeout;
      break;
    }
    std::vector<pollfd> fds{{listener_, POLLIN, 0}};
    for (const Peer& p : pending) fds.push_back({p.s.fd, POLLIN, 0});
    const int r = ::poll(fds.data(), fds.size(), left);
    if (r < 0 && errno == EINTR) continue;
    check(r >= 0, ErrorKind::io, std::string("rendezvous: poll: ") + std::strerror(errno));
    for (size_t i = pending.size(); i-- > 0 && refusal.empty();) {
      if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Peer& p = pending[i];
      char buf[1024];
      const ssize_t n = ::recv(p.s.fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      Hello h;
      std::string why = n <= 0 ? "it closed before saying hello" : "";
      Parsed parsed = Parsed::garbage;
      if (n > 0) {
        p.in.append(buf, static_cast<size_t>(n));
        if (p.in.size() > kHelloBytes + kRendezvousMaxBytes) {
          why = "it sent too much";
        } else {
          parsed = parse_hello(p.in, h, why);
        }
      }
      if (parsed == Parsed::incomplete) continue;
      if (parsed == Parsed::garbage) {
        log_warn("rendezvous: dropped a connection from ", p.who, ": ", why);
      } else if (refusal = check_hello(h); refusal.empty()) {
        log_info("rendezvous: node ", h.node_rank, " (", p.who, ") joined");
        nodes[h.node_rank] = std::move(p.s);
        ++arrived;
      } else {
        send_all(p.s.fd, encode_reply(1, refusal));
      }
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (refusal.empty() && (fds[0].revents & POLLIN)) {
      sockaddr_storage a{};
      socklen_t len = sizeof a;
      Socket s(::accept4(listener_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC));
      if (s.fd >= 0 && pending.size() < kMaxPending) {
        pending.push_back({std::move(s), peer_name(a, len), {}});
      }
    }
  }
  if (!refusal.empty()) {
    for (Socket& n : nodes) {
      if (n.fd >= 0) send_all(n.fd, encode_reply(1, refusal));
    }
    throw Error(kind, refusal);
  }
  const std::string reply = encode_reply(0, payload);
  for (int r = 1; r < group_.nnodes; ++r) {
    check(send_all(nodes[r].fd, reply), ErrorKind::io,
          "node " + std::to_string(r) + " left the rendezvous before it got NCCL's id");
  }
  for (int r = 1; r < group_.nnodes; ++r) {
    connections_.push_back(nodes[r].fd);
    nodes[r].fd = -1;
  }
}

std::string rendezvous_join(const NodeGroup& group, const std::string& not_ready, int* keep) {
  check(group.nnodes >= 2 && group.node_rank >= 1 && group.node_rank < group.nnodes,
        ErrorKind::internal, "rendezvous_join: a node other than node 0");
  const std::string where = host_port(group.master);
  const std::string me = "node " + std::to_string(group.node_rank);
  const std::string message = not_ready.substr(0, kRendezvousMaxBytes);
  std::string hello(kMagic, sizeof kMagic);
  put32(hello, kRendezvousVersion);
  put32(hello, static_cast<uint32_t>(group.nnodes));
  put32(hello, static_cast<uint32_t>(group.node_rank));
  put32(hello, static_cast<uint32_t>(group.ranks));
  put64(hello, group.fingerprint);
  put32(hello, not_ready.empty() ? 0 : 1);
  put32(hello, static_cast<uint32_t>(message.size()));
  hello += message;

  const auto deadline = Clock::now() + group.timeout;
  auto backoff = std::chrono::milliseconds(100);
  std::string last = "no attempt";
  for (;;) {
    Socket s(connect_to(group.master, deadline, last));
    if (s.fd >= 0 && !send_all(s.fd, hello))
      last = std::string("send: ") + std::strerror(errno);
    else if (s.fd >= 0) {
      char head[kReplyBytes];
      std::string e = recv_exact(s.fd, head, sizeof head, deadline);
      if (e == "timed out") {
        throw Error(ErrorKind::timeout,
                    me + " reached node 0 at " + where + " but the run did not start within " +
                        seconds(group.timeout) + " s: not every node came (node 0 says which)");
      }
      if (!e.empty()) {
        throw Error(ErrorKind::io, me + ": node 0 at " + where +
                                       " ended the rendezvous without an answer (" + e +
                                       "); its own output says why");
      }
      const uint32_t status = get32(head + 8), length = get32(head + 12);
      if (std::memcmp(head, kMagic, sizeof kMagic) != 0 || length > kRendezvousMaxBytes) {
        throw Error(ErrorKind::io,
                    me + ": what answers at " + where + " is not hibana's node 0 (check --master)");
      }
      std::string body(length, '\0');
      e = recv_exact(s.fd, body.data(), length, deadline);
      if (!e.empty()) {
        throw Error(ErrorKind::io,
                    me + ": the answer of node 0 at " + where + " broke off (" + e + ")");
      }
      if (status == 0) {
        if (keep) std::swap(*keep, s.fd);
        return body;
      }
      throw Error(ErrorKind::invalid_argument, "node 0 (" + where + ") refused this run: " + body);
    }
    if (Clock::now() + backoff >= deadline) {
      throw Error(ErrorKind::timeout,
                  me + " could not reach node 0 at " + where + " within " + seconds(group.timeout) +
                      " s (last error: " + last +
                      "): start node 0 (--node-rank 0) with the same --master, and check the "
                      "address and that the port is open to this host");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

}  // namespace hibana
