// ThreadSanitizer suppressions for the gRPC tests, compiled into their
// binaries (TSAN reads __tsan_default_suppressions at startup).
//
// Debian's libgrpc, libgpr, libabsl and libprotobuf are not built
// with -fsanitize=thread: their own memory accesses are invisible to TSAN and
// their synchronisation (absl::Mutex on futexes) creates no happens-before
// edges. TSAN then reports the intercepted calls they make (epoll_wait on an
// fd another gRPC thread created, absl's deadlock-detector memmoves) as races
// that cannot be real. called_from_lib ignores only interceptors called
// directly from those libraries; every access our own (instrumented) code
// makes is still checked.
//
// For the same reason TSAN sees no happens-before edge for any hand-off
// through gRPC: a request parsed on one gRPC thread and handled on another,
// a reactor started by one thread and resumed on a gRPC thread, a client
// call's state written by the caller and read in its completion callback.
// Those reports (hundreds, in gRPC's inline headers, generated protobuf code
// and ours alike) are suppressed by the race: entries naming gRPC's runtime
// libraries, which match any report with a gRPC thread on either side. What
// remains checked is the synchronisation among our own threads (callers,
// the service executor, the eviction loop, the store's threads, the tests).
// A sound check of the gRPC boundary needs gRPC, protobuf and absl built
// with -fsanitize=thread. The same holds for objects gRPC hands between
// threads whose frames symbolise only as library offsets (absl::Status and
// Cord payloads, upb messages), and for RocksDB (Debian's static library is
// uninstrumented; its memtable is read lock-free with atomics TSAN cannot
// see).
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libgrpc.so\n"
         "called_from_lib:libgrpc++.so\n"
         "called_from_lib:libgpr.so\n"
         // Each entry must name exactly one library: absl's synchronisation
         // and the allocator and debugging code it calls.
         "called_from_lib:libabsl_synchronization.so\n"
         "called_from_lib:libabsl_graphcycles_internal.so\n"
         "called_from_lib:libabsl_malloc_internal.so\n"
         "called_from_lib:libabsl_base.so\n"
         "called_from_lib:libabsl_spinlock_wait.so\n"
         "called_from_lib:libabsl_stacktrace.so\n"
         "called_from_lib:libabsl_symbolize.so\n"
         "called_from_lib:libabsl_time.so\n"
         "called_from_lib:libabsl_cord.so\n"
         "called_from_lib:libabsl_cord_internal.so\n"
         "called_from_lib:libabsl_strings.so\n"
         "called_from_lib:libprotobuf.so\n"

         "race:libgrpc.so\n"
         "race:libgrpc++.so\n"
         "race:libgpr.so\n"
         "race:libupb.so\n"
         "race:libabsl_status.so\n"
         "race:libabsl_cord.so\n"
         "race:libabsl_time_zone.so\n"
         "race:rocksdb::\n"
         "race:libprometheus-cpp-pull.so\n"
         // Finish/StartWrite from our executor thread reads gRPC's call
         // object, which the server frees after Shutdown() has waited for
         // the call, inside libgrpc.
         "race:grpc::internal::Call::PerformOps\n"
         // gRPC core's own threads (timer manager, executor) that it joins
         // lazily after the last server or channel is gone: a test that
         // ends while they wind down sees them as leaked.
         "thread:libgpr.so\n"
         // A blocking stub reads an error message written on a gRPC server thread.
         "race:grpc::internal::CallOpClientRecvStatus::FinishOp\n";
}
#endif
