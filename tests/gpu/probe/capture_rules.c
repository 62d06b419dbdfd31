/* Real-driver facts for the simulator (issues #32, #33): which driver calls are legal while a
 * stream capture is live, by capture mode and calling thread, and what each call costs.
 * Build: gcc -O2 -I$CUDA/include capture_rules.c -lcuda -lpthread
 * Output: one `key=value ...` line per measurement. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if CUDA_VERSION >= 13000
#define CAPINFO(s, st, id) cuStreamGetCaptureInfo((s), (st), (id), 0, 0, 0, 0)
#else
#define CAPINFO(s, st, id) cuStreamGetCaptureInfo((s), (st), (id), 0, 0, 0)
#endif

static CUcontext ctx;
static CUstream cap, other;
static CUevent ev_done, ev_cap, ev_tmp;
static CUdeviceptr buf, spare;
static CUfunction kempty;
static const char *PTX =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry empty()\n{\n ret;\n}\n";

static const char *ename(CUresult r) {
  const char *s = 0;
  if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) return "?";
  return s;
}
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("fatal %s line=%d rc=%s\n", #x, __LINE__, ename(r_)); fflush(stdout); exit(1);} } while (0)

enum { N_OPS = 26 };
static const char *OP_NAMES[N_OPS] = {
  "event_query_uncaptured", "event_sync_uncaptured", "event_query_captured",
  "event_sync_captured", "event_record_capturing_stream", "event_record_other_stream",
  "stream_query_other", "stream_sync_other", "stream_query_capturing", "stream_sync_capturing",
  "ctx_synchronize", "mem_alloc_free", "mem_free_preallocated", "mem_alloc_async_other",
  "mem_alloc_async_capturing", "memset_legacy_stream", "memset_other_stream",
  "get_capture_info", "is_capturing", "mem_get_info", "wait_event_capturing_on_uncaptured",
  "launch_other_stream", "exchange_relaxed_then_event_sync", "memcpy_htod_sync",
  "event_elapsed_uncaptured", "stream_query_legacy"};

static CUresult do_op(int op) {
  CUresult r = CUDA_SUCCESS;
  size_t f, t;
  CUdeviceptr p;
  CUstreamCaptureStatus st;
  cuuint64_t id;
  unsigned int host = 0;
  float ms;
  switch (op) {
  case 0: return cuEventQuery(ev_done);
  case 1: return cuEventSynchronize(ev_done);
  case 2: return cuEventQuery(ev_cap);
  case 3: return cuEventSynchronize(ev_cap);
  case 4: return cuEventRecord(ev_tmp, cap);
  case 5: return cuEventRecord(ev_tmp, other);
  case 6: return cuStreamQuery(other);
  case 7: return cuStreamSynchronize(other);
  case 8: return cuStreamQuery(cap);
  case 9: return cuStreamSynchronize(cap);
  case 10: return cuCtxSynchronize();
  case 11: r = cuMemAlloc(&p, 1 << 20); if (!r) cuMemFree(p); return r;
  case 12: r = cuMemFree(spare); if (!r) { spare = 0; } return r;
  case 13: r = cuMemAllocAsync(&p, 1 << 20, other); if (!r) cuMemFreeAsync(p, other); return r;
  case 14: r = cuMemAllocAsync(&p, 1 << 20, cap); if (!r) cuMemFreeAsync(p, cap); return r;
  case 15: return cuMemsetD32Async(buf, 1, 16, CU_STREAM_LEGACY);
  case 16: return cuMemsetD32Async(buf, 1, 16, other);
  case 17: return CAPINFO(cap, &st, &id);
  case 18: return cuStreamIsCapturing(cap, &st);
  case 19: return cuMemGetInfo(&f, &t);
  case 20: return cuStreamWaitEvent(cap, ev_done, 0);
  case 21: return cuLaunchKernel(kempty, 1, 1, 1, 1, 1, 1, 0, other, 0, 0);
  case 22: {
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CK(cuThreadExchangeStreamCaptureMode(&m));
    r = cuEventSynchronize(ev_done);
    CK(cuThreadExchangeStreamCaptureMode(&m));
    return r;
  }
  case 23: return cuMemcpyHtoD(buf, &host, sizeof host);
  case 24: return cuEventElapsedTime(&ms, ev_done, ev_done);
  case 25: return cuStreamQuery(CU_STREAM_LEGACY);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

struct job { int op; CUresult rc; };
static void *thread_op(void *a) {
  struct job *j = a;
  CK(cuCtxSetCurrent(ctx));
  j->rc = do_op(j->op);
  return 0;
}

static const char *status_name(CUstreamCaptureStatus s) {
  return s == CU_STREAM_CAPTURE_STATUS_NONE ? "none"
       : s == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "active" : "invalidated";
}

static void one(CUstreamCaptureMode mode, int op, int other_thread) {
  const char *mname = mode == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global"
                    : mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? "thread_local" : "relaxed";
  if (!spare) CK(cuMemAlloc(&spare, 1 << 20));
  CK(cuEventRecord(ev_done, other));
  CK(cuStreamSynchronize(other));
  CK(cuStreamBeginCapture(cap, mode));
  CUresult pre = cuMemsetD32Async(buf, 7, 16, cap);
  CUresult rec = cuEventRecord(ev_cap, cap);
  struct job j = {op, CUDA_SUCCESS};
  if (other_thread) {
    pthread_t t;
    pthread_create(&t, 0, thread_op, &j);
    pthread_join(t, 0);
  } else {
    j.rc = do_op(op);
  }
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult isr = cuStreamIsCapturing(cap, &st);
  CUresult post = cuMemsetD32Async(buf, 8, 16, cap);
  CUgraph g = 0;
  CUresult end = cuStreamEndCapture(cap, &g);
  if (g) cuGraphDestroy(g);
  CUresult sync = cuCtxSynchronize();
  printf("capture mode=%s thread=%s op=%s op_rc=%s status_after=%s is_capturing_rc=%s "
         "work_after_rc=%s end_rc=%s ctx_sync_after=%s pre_rc=%s rec_rc=%s\n",
         mname, other_thread ? "other" : "same", OP_NAMES[op], ename(j.rc), status_name(st),
         ename(isr), ename(post), ename(end), ename(sync), ename(pre), ename(rec));
  fflush(stdout);
}

/* Launches timed in batches of 500 so that the queue never fills; the sync is not timed. */
#define COSTL(name, stmt) do { double sum_ = 0; for (int b_ = 0; b_ < 40; b_++) { \
  double t0 = now_ns(); for (int i_ = 0; i_ < 500; i_++) { stmt; } sum_ += now_ns() - t0; \
  CK(cuCtxSynchronize()); } \
  printf("cost op=%s ns=%.1f n=20000\n", name, sum_ / 20000); fflush(stdout); } while (0)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

#define COST(name, n, stmt) do { \
  double t0 = now_ns(); for (int i_ = 0; i_ < (n); i_++) { stmt; } double t1 = now_ns(); \
  printf("cost op=%s ns=%.1f n=%d\n", name, (t1 - t0) / (n), (n)); fflush(stdout); } while (0)

static void costs(void) {
  CUstreamCaptureStatus st; cuuint64_t id; CUcontext c; CUdevice d;
  struct timespec ts; size_t f, t;
  int n = 200000;
  for (int rep = 0; rep < 3; rep++) {
    printf("cost rep=%d\n", rep);
    COST("clock_gettime_monotonic", n, clock_gettime(CLOCK_MONOTONIC, &ts));
    COST("clock_gettime_monotonic_coarse", n, clock_gettime(CLOCK_MONOTONIC_COARSE, &ts));
    COST("cuCtxGetCurrent", n, cuCtxGetCurrent(&c));
    COST("cuCtxGetDevice", n, cuCtxGetDevice(&d));
    COST("cuStreamIsCapturing", n, cuStreamIsCapturing(other, &st));
    COST("cuStreamGetCaptureInfo", n, CAPINFO(other, &st, &id));
    COST("cuEventQuery_done", n, cuEventQuery(ev_done));
    COST("cuStreamQuery_idle", n, cuStreamQuery(other));
    CK(cuCtxSynchronize());
    for (int k = 0; k < 5; k++) {
      COSTL("cuLaunchKernel_empty", cuLaunchKernel(kempty, 1, 1, 1, 1, 1, 1, 0, other, 0, 0));
      COSTL("cuLaunchKernel_then_cuEventRecord", (cuLaunchKernel(kempty, 1, 1, 1, 1, 1, 1, 0, other, 0, 0), cuEventRecord(ev_tmp, other)));
      COSTL("cuLaunchKernel_then_cuEventQuery", (cuLaunchKernel(kempty, 1, 1, 1, 1, 1, 1, 0, other, 0, 0), cuEventQuery(ev_done)));
      COSTL("cuLaunchKernel_then_isCapturing", (cuLaunchKernel(kempty, 1, 1, 1, 1, 1, 1, 0, other, 0, 0), cuStreamIsCapturing(other, &st)));
      CK(cuCtxSynchronize());
    }
    COST("cuEventRecord_alone", 20000, cuEventRecord(ev_tmp, other));
    CK(cuCtxSynchronize());
    COST("cuMemGetInfo", 20000, cuMemGetInfo(&f, &t));
  }
}

/* PyTorch's pattern: fork a side stream from the capture with an event, work on both, join. */
static void fork_join(CUstreamCaptureMode mode) {
  CUevent fork, join;
  CK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  CK(cuStreamBeginCapture(cap, mode));
  CUresult r1 = cuEventRecord(fork, cap);
  CUresult r2 = cuStreamWaitEvent(other, fork, 0);
  CUstreamCaptureStatus st; CUresult r3 = cuStreamIsCapturing(other, &st);
  CUresult r4 = cuLaunchKernel(kempty, 1, 1, 1, 1, 1, 1, 0, other, 0, 0);
  CUresult r5 = cuEventRecord(join, other);
  CUresult r6 = cuStreamWaitEvent(cap, join, 0);
  CUgraph g = 0;
  CUresult end = cuStreamEndCapture(cap, &g);
  size_t nodes = 0;
  if (g) cuGraphGetNodes(g, 0, &nodes);
  CUgraphExec ex = 0;
  CUresult inst = g ? cuGraphInstantiate(&ex, g, 0) : CUDA_ERROR_INVALID_VALUE;
  CUresult ql = cuEventQuery(join);
  printf("forkjoin mode=%d rec=%s wait=%s side_status=%s launch=%s join_rec=%s join_wait=%s end=%s nodes=%zu inst=%s query_join_after=%s\n",
         (int)mode, ename(r1), ename(r2), status_name(st), ename(r4), ename(r5), ename(r6), ename(end), nodes, ename(inst), ename(ql));
  (void)r3;
  if (ex) cuGraphExecDestroy(ex);
  if (g) cuGraphDestroy(g);
  cuCtxSynchronize();
}

int main(void) {
  CUdevice dev;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CK(cuModuleLoadData(&mod, PTX));
  CK(cuModuleGetFunction(&kempty, mod, "empty"));
  CK(cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&ev_done, 0));
  CK(cuEventCreate(&ev_cap, 0));
  CK(cuEventCreate(&ev_tmp, CU_EVENT_DISABLE_TIMING));
  CK(cuMemAlloc(&buf, 1 << 20));
  int v; cuDriverGetVersion(&v);
  printf("driver version=%d\n", v);
  CUstreamCaptureMode modes[3] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                  CU_STREAM_CAPTURE_MODE_RELAXED};
  for (int m = 0; m < 3; m++)
    for (int op = 0; op < N_OPS; op++)
      for (int th = 0; th < 2; th++) one(modes[m], op, th);
  for (int m = 0; m < 3; m++) fork_join(modes[m]);
  /* A legacy-stream capture is refused? */
  CUresult lr = cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL);
  printf("capture_legacy rc=%s\n", ename(lr));
  if (!lr) { CUgraph g; cuStreamEndCapture(CU_STREAM_LEGACY, &g); }
  costs();
  return 0;
}
