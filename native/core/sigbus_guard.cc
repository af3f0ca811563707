// A program may register memory that is a shared mapping of a file it can shrink (a POSIX shared
// memory object, a file mapped MAP_SHARED): unlike our memfds, such a file cannot be sealed
// against shrinking. Mapped here, an access past its new end would raise SIGBUS and end the daemon
// and every other program's session with it. So its mappings are guarded, as a Wayland compositor
// guards its clients' shared memory pools: a SIGBUS inside a guarded range maps a private zero
// page over the faulting page and the access goes on (what the program truncated is gone for
// everybody; its own accesses fault in its own process). A SIGBUS anywhere else goes to the handler
// that was there before, or kills the process as it would have.
//
// The slots are read by the handler without locks: a slot's end is stored before its start, and
// its start cleared first when freed; `high` only grows.
#include "sigbus_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace rg {
namespace {

struct Slot {
  std::atomic<uintptr_t> start{0}, end{0};
};

Slot slots[kSigbusGuardSlots];
std::atomic<int> high{0};
std::atomic<uint64_t> faults{0};
std::mutex mu;
bool installed = false;
struct sigaction previous;

void OnSigbus(int sig, siginfo_t* si, void* uc) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  const int n = high.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++) {
    const uintptr_t s = slots[i].start.load(std::memory_order_acquire);
    if (s != 0 && a >= s && a < slots[i].end.load(std::memory_order_relaxed)) {
      const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
      void* p = reinterpret_cast<void*>(a & ~(page - 1));
      if (mmap(p, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
        faults.fetch_add(1, std::memory_order_relaxed);
        return;  // the access again, on the zero page
      }
      break;
    }
  }
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) return previous.sa_sigaction(sig, si, uc);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    return previous.sa_handler(sig);
  }
  signal(SIGBUS, SIG_DFL);  // the fault again, with the default action
}

}  // namespace

int SigbusGuardAdd(void* start, size_t len) {
  std::lock_guard<std::mutex> lock(mu);
  if (!installed) {
    struct sigaction a = {};
    a.sa_sigaction = OnSigbus;
    a.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
    sigemptyset(&a.sa_mask);
    if (sigaction(SIGBUS, &a, &previous) != 0) return -1;
    installed = true;
  }
  const int n = high.load(std::memory_order_relaxed);
  for (int i = 0; i < kSigbusGuardSlots; i++) {
    if (i < n && slots[i].start.load(std::memory_order_relaxed) != 0) continue;
    slots[i].end.store(reinterpret_cast<uintptr_t>(start) + len, std::memory_order_relaxed);
    slots[i].start.store(reinterpret_cast<uintptr_t>(start), std::memory_order_release);
    if (i >= n) high.store(i + 1, std::memory_order_release);
    return i;
  }
  return -1;
}

void SigbusGuardRemove(int slot) {
  if (slot < 0 || slot >= kSigbusGuardSlots) return;
  std::lock_guard<std::mutex> lock(mu);
  slots[slot].start.store(0, std::memory_order_release);
}

uint64_t SigbusGuardFaults() { return faults.load(std::memory_order_relaxed); }

}  // namespace rg
