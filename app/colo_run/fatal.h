#pragma once
// colo-run's report of a fatal signal (a crash inside LibTorch, NCCL or CUDA, or an abort): which
// process of the job it hit (the launcher or a rank), the signal, the faulting address and
// instruction, the stack as glibc unwinds it, and, because a jump to a bad address leaves the unwinder
// nothing to walk, every word near the top of the stack that points into loaded code, as module and
// offset (addr2line -e MODULE OFFSET names the function where the module has symbols). Then the process
// ends as the signal would have ended it.
#include <string>

namespace colo::app {

/// Installs the report for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT, naming `role`.
void reportFatalSignalsAs(const std::string& role);

}  // namespace colo::app
