#pragma once
// Counts the calling thread's heap allocations through operator new (replaced in
// alloc_counter.cpp for the whole test binary), so a test can show that some code allocates
// nothing.
#include <cstddef>

namespace parallax::test {

/// Allocations (operator new of any form) made by the calling thread so far.
size_t allocations_on_this_thread();

}  // namespace parallax::test
