// Across hosts, one node's end must end the others: their ranks would otherwise wait in an NCCL
// collective for ever (NCCL has no timeout, and each node's mpirun only sees its own ranks).
// The rendezvous connections (node 0 to every node) stay open for the run, and a NodeWatch on
// each end watches them: a connection that closes without a goodbye means that node's hibana
// ended (crashed, was killed, aborted), and `lost` is called once, on the watch's thread, with
// the words to print. Ending cleanly, its owner says goodbye (the byte 'B') on each connection
// first, so the peers stop watching it; without one (an error, an exception) they end too. Node 0
// watches every node; the others watch node 0: a node that ends makes node 0 end, which makes every
// other node end.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace hibana {

class NodeWatch {
 public:
  using Lost = std::function<void(const std::string& why)>;
  // Takes the connections (sockets, closed by the destructor); `names[i]` says who is at the
  // other end of connections[i] ("node 2").
  NodeWatch(std::vector<int> connections, std::vector<std::string> names, Lost lost);
  // Stops watching and closes the connections (without a goodbye: the peers end).
  ~NodeWatch();
  // This side ends cleanly: the peers stop watching it. Then destroy the watch.
  void say_goodbye();
  NodeWatch(const NodeWatch&) = delete;
  NodeWatch& operator=(const NodeWatch&) = delete;

 private:
  void watch();

  std::vector<int> fds_;
  std::vector<std::string> names_;
  Lost lost_;
  int stop_[2] = {-1, -1};  // a pipe: written to stop the thread
  std::thread thread_;
};

}  // namespace hibana
