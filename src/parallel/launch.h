// How the ranks of a tensor-parallel run start: the command the user typed (`hibana run --tp 2`)
// re-executes itself under the MPI launcher as N ranks, each running the same command.
#pragma once

namespace hibana {

// True when this process is one rank of an MPI job (started by mpirun, by hand or by
// relaunch_as_ranks).
bool launched_as_ranks();

// Replaces this process with `mpirun -np ranks <this executable> <its arguments>` (and
// `--threads` cores/ranks unless the arguments give one). The launcher is the mpirun of the MPI
// the build was linked against when it exists, else `mpirun` on PATH. Returns only by throwing
// Error: no launcher, a build without MPI, or a second relaunch from inside a job.
[[noreturn]] void relaunch_as_ranks(int ranks);

}  // namespace hibana
