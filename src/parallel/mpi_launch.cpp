// Starting the ranks of a tensor-parallel run: the process re-executes itself under mpirun.
//
// Why mpirun: Open MPI's ranks need its runtime (PMIx) to find one another, and mpirun is the
// supported way to start it; MPI_Comm_spawn from a singleton works but starts the same runtime
// behind the user's back and is fragile across versions. Exec (not fork) keeps one process for
// the user to signal: mpirun forwards Ctrl-C to the ranks and exits with the first failing
// rank's status. Each rank finds itself launched (launched_as_ranks) and runs the command.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "parallel/launch.h"
#include "parallel/rendezvous.h"

namespace hibana {

namespace {

constexpr const char* kRelaunched = "HIBANA_TP_RELAUNCHED";

std::vector<std::string> own_arguments() {
  std::vector<std::string> args = process_arguments();
  check(!args.empty(), ErrorKind::io, "cannot read this process's arguments (/proc/self/cmdline)");
  return args;
}

std::string own_executable() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  check(n > 0, ErrorKind::io, "cannot find this executable (/proc/self/exe)");
  return std::string(buf.data(), static_cast<size_t>(n));
}

// The launcher of the MPI we were linked against, when it is installed; else mpirun on PATH.
std::string launcher() {
  if (const char* env = std::getenv("HIBANA_MPIRUN"); env && *env) return env;
  const std::string built = HIBANA_MPIEXEC;
  if (!built.empty() && ::access(built.c_str(), X_OK) == 0) return built;
  return "mpirun";
}

}  // namespace

bool launched_as_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (const char* v = std::getenv(var); v && *v) return true;
  }
  return false;
}

void relaunch_as_ranks(int ranks) {
  check(ranks > 1, ErrorKind::internal, "relaunch_as_ranks: fewer than two ranks");
  if (std::getenv(kRelaunched)) {
    throw Error(ErrorKind::internal,
                "hibana was relaunched as ranks but is not an MPI rank: the mpirun found belongs "
                "to another MPI than the one hibana was built with (set HIBANA_MPIRUN)");
  }
  const std::vector<std::string> own = own_arguments();
  std::vector<std::string> args = {launcher(), "-np", std::to_string(ranks)};
#ifdef OPEN_MPI
  // More ranks than cores is fine (a laptop runs --tp 2 on 2 cores); each rank's thread pool
  // spreads over the cores instead of being bound to one; hibana reports its own errors.
  args.insert(args.end(), {"--oversubscribe", "--bind-to", "none", "--quiet"});
  // Open MPI refuses root unless told; the ranks are this same program on this host, run by a
  // user who already runs it as root.
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
#endif
  args.push_back(own_executable());
  const bool has_threads = std::any_of(own.begin() + 1, own.end(), [](const std::string& a) {
    return a == "--threads" || a.rfind("--threads=", 0) == 0;
  });
  if (!has_threads) {  // the ranks share the cores
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    args.insert(args.end(), {"--threads", std::to_string(std::max(1, cores / ranks))});
  }
  args.insert(args.end(), own.begin() + 1, own.end());
  log_debug("starting ", ranks, " ranks: ", args[0]);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::setenv(kRelaunched, "1", 1);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execvp(argv[0], argv.data());
  throw Error(ErrorKind::not_found, "cannot start the MPI launcher '" + args[0] +
                                        "': " + std::strerror(errno) +
                                        " (install openmpi-bin or set HIBANA_MPIRUN)");
}

}  // namespace hibana
