// Guarded mappings of files a program registered that may shrink under us (sigbus_guard.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rg {

// [start, start + len) guarded: an access past the end of its file (shrunk by the program that
// shares it) gets a zero page there instead of SIGBUS. Returns the slot, or -1 when every slot is
// taken (kSigbusGuardSlots) or the handler cannot be set.
int SigbusGuardAdd(void* start, size_t len);
// The slot freed: call before the range is unmapped.
void SigbusGuardRemove(int slot);
// How many pages were replaced so far.
uint64_t SigbusGuardFaults();

constexpr int kSigbusGuardSlots = 16384;

}  // namespace rg
