// Whether an HTTP client is still connected while its request is being served.
//
// cpp-httplib 0.11 (Debian 12's) gives handlers no access to the connection: Request has no
// is_connection_closed() (added in later versions) and DataSink::is_writable() only checks
// that a write would not block. A streaming response notices a gone client when a write fails;
// to notice it earlier (during a long prefill, or for a non-streaming request, which writes
// nothing until the end) the probe finds the connection's socket among the process's file
// descriptors by its two endpoints (Request::local_addr/port and remote_addr/port, unique
// among open connections; the socket stays open while its handler runs) and peeks at it: an
// orderly shutdown (FIN), a reset or an error mean the client is gone. A client that half-
// closes its sending side but still waits for the answer is taken as gone too.
#pragma once

#include <string>

namespace hibana::server {

class ConnectionProbe {
 public:
  ConnectionProbe(std::string local_addr, int local_port, std::string remote_addr, int remote_port);
  // True once the peer has closed or reset the connection. Cheap after the first call (which
  // scans /proc/self/fd); false when the socket cannot be found, unless a socket on the local
  // endpoint has lost its peer (a connection reset before the first call: its socket can no
  // longer be found by the peer's address).
  bool closed();

 private:
  // The connection's socket, or -1; peer_lost: a socket on the local endpoint has no peer.
  int find_socket(bool& peer_lost) const;
  std::string local_addr_, remote_addr_;
  int local_port_, remote_port_;
  int fd_ = -2;  // -2: not looked up yet, -1: not found
  bool closed_ = false;
};

}  // namespace hibana::server
