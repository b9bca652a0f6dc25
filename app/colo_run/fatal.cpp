#include "fatal.h"

#include <execinfo.h>
#include <fcntl.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace colo::app {
namespace {

// Everything below runs inside the signal handler: no allocation, no stdio; only write(), open(),
// read() and arithmetic on static buffers.
char gPrefix[96] = "colo-run";
char gMaps[1 << 18];
std::size_t gMapsSize = 0;

void put(const char* s) {
  const ssize_t wrote = write(STDERR_FILENO, s, std::strlen(s));
  (void)wrote;
}

void putHex(std::uintptr_t v) {
  char buf[19] = "0x";
  char digits[16];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v && n < 16);
  for (int i = 0; i < n; ++i) buf[2 + i] = digits[n - 1 - i];
  buf[2 + n] = '\0';
  put(buf);
}

void putDec(long v) {
  char buf[24];
  int n = 0;
  const bool negative = v < 0;
  unsigned long u = negative ? static_cast<unsigned long>(-v) : static_cast<unsigned long>(v);
  do {
    buf[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u);
  char out[26];
  int k = 0;
  if (negative) out[k++] = '-';
  while (n) out[k++] = buf[--n];
  out[k] = '\0';
  put(out);
}

void readMaps() {
  gMapsSize = 0;
  const int fd = open("/proc/self/maps", O_RDONLY);
  if (fd < 0) return;
  while (gMapsSize < sizeof gMaps - 1) {
    const ssize_t got = read(fd, gMaps + gMapsSize, sizeof gMaps - 1 - gMapsSize);
    if (got <= 0) break;
    gMapsSize += static_cast<std::size_t>(got);
  }
  close(fd);
  gMaps[gMapsSize] = '\0';
}

std::uintptr_t parseHex(const char*& p) {
  std::uintptr_t v = 0;
  for (;; ++p) {
    const char c = *p;
    if (c >= '0' && c <= '9') v = v * 16 + static_cast<std::uintptr_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v = v * 16 + static_cast<std::uintptr_t>(c - 'a' + 10);
    else return v;
  }
}

// The executable mapping holding `address`: its file (or "[anonymous]") into `name`, and the offset
// of `address` in that file. False when no executable mapping holds it.
bool lookupCode(std::uintptr_t address, char (&name)[512], std::uintptr_t& offset) {
  const char* p = gMaps;
  const char* end = gMaps + gMapsSize;
  while (p < end) {
    const char* line = p;
    const char* eol = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
    if (!eol) eol = end;
    p = eol + 1;
    const char* q = line;
    const std::uintptr_t lo = parseHex(q);
    ++q;  // '-'
    const std::uintptr_t hi = parseHex(q);
    ++q;  // ' '
    const bool exec = q + 3 < eol && q[2] == 'x';
    if (!exec || address < lo || address >= hi) continue;
    q += 5;  // the permissions and a space
    offset = address - lo + parseHex(q);
    const char* path = static_cast<const char*>(std::memchr(q, '/', static_cast<std::size_t>(eol - q)));
    std::size_t len = path ? static_cast<std::size_t>(eol - path) : 0;
    if (len >= sizeof name) len = sizeof name - 1;
    if (path) std::memcpy(name, path, len);
    else std::memcpy(name, "[anonymous]", len = 11);
    name[len] = '\0';
    return true;
  }
  return false;
}

// Writes "MODULE+0xOFFSET" for an address in loaded code; false (and nothing written) otherwise.
bool putCodeAddress(std::uintptr_t address) {
  char name[512];
  std::uintptr_t offset = 0;
  if (!lookupCode(address, name, offset)) return false;
  put(name);
  put("+");
  putHex(offset);
  return true;
}

void onFatal(int s, siginfo_t* info, void* context) {
  put(gPrefix);
  put(": fatal signal ");
  putDec(s);
  put(" at address ");
  putHex(reinterpret_cast<std::uintptr_t>(info ? info->si_addr : nullptr));
  readMaps();
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  const auto pc = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const auto* sp = reinterpret_cast<const std::uintptr_t*>(uc->uc_mcontext.gregs[REG_RSP]);
  put("; instruction ");
  putHex(pc);
  put(" (");
  if (!putCodeAddress(pc)) put("not in loaded code");
  put(")\n");
  put("stack words that point into code (return addresses, innermost first):\n");
  int shown = 0;
  for (int i = 0; i < 128 && shown < 24; ++i) {
    char name[512];
    std::uintptr_t offset = 0;
    if (sp[i] < 4096 || !lookupCode(sp[i], name, offset)) continue;
    put("  ");
    putCodeAddress(sp[i]);
    put("\n");
    ++shown;
  }
#else
  (void)context;
  put("\n");
#endif
  put("stack as unwound:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  std::signal(s, SIG_DFL);
  raise(s);
}

}  // namespace

void reportFatalSignalsAs(const std::string& role) {
  std::snprintf(gPrefix, sizeof gPrefix, "colo-run: %s", role.c_str());
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now, not inside the handler
  struct sigaction action {};
  action.sa_sigaction = onFatal;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (const int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(s, &action, nullptr);
}

}  // namespace colo::app
