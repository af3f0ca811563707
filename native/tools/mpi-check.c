/*
 * An MPI job's traffic with its data checked, for test/verbs-mpi.test.ts (compiled there with
 * Open MPI's mpicc; run by mpirun with each rank under `rdma-graph exec`).
 *
 * A ping-pong between rank 0 and the last rank, 8 B to 1 MiB (each power of 2), every byte of
 * every message checked against a pattern of (size, iteration, direction); then MPI_Allreduce
 * (MPI_SUM of doubles, 1 and 65536 elements) over every rank, checked against the sum computed
 * locally; then MPI_Put and MPI_Get of 64 KiB between neighbouring ranks' windows, checked; then
 * a barrier. Each rank first prints "rank R UCX_TLS=..." (its environment's, or "(unset)"): what
 * mpirun gave every rank. Rank 0 prints one line per size ("pingpong SIZE ITERS lat_us MB/s"),
 * "allreduce N ok", "rma N ok" and, last, "mpi-check: ok RANKS"; any mismatch prints
 * "mpi-check: FAIL ..." and aborts the job with status 1.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (1 << 20)

static int rank, nranks;

static void fail(const char* what, long a, long b) {
  fprintf(stderr, "mpi-check: FAIL rank %d: %s (%ld, %ld)\n", rank, what, a, b);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static uint8_t pattern(size_t size, int iter, int dir, size_t i) {
  return (uint8_t)(i * 131u + size * 7u + (unsigned)iter * 13u + (unsigned)dir * 101u + 1u);
}

static void fill(uint8_t* b, size_t size, int iter, int dir) {
  for (size_t i = 0; i < size; i++) b[i] = pattern(size, iter, dir, i);
}

static void check(const uint8_t* b, size_t size, int iter, int dir) {
  for (size_t i = 0; i < size; i++)
    if (b[i] != pattern(size, iter, dir, i)) fail("ping-pong data differs at byte (size, offset)", (long)size, (long)i);
}

static int iterations(size_t size) {
  if (size <= 4096) return 100;
  if (size <= 65536) return 20;
  return 10;
}

static void pingpong(uint8_t* sbuf, uint8_t* rbuf) {
  const int peer = rank == 0 ? nranks - 1 : 0;
  const int active = rank == 0 || rank == nranks - 1;
  for (size_t size = 8; size <= MAX_SIZE; size *= 2) {
    const int n = iterations(size);
    double t0 = MPI_Wtime();
    for (int it = 0; active && it < n; it++) {
      MPI_Status st;
      int got = 0;
      if (rank == 0) {
        fill(sbuf, size, it, 0);
        MPI_Send(sbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
        memset(rbuf, 0, size);
        MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != size) fail("ping-pong reply length (size, got)", (long)size, got);
        check(rbuf, size, it, 1);
      } else {
        memset(rbuf, 0, size);
        MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != size) fail("ping-pong message length (size, got)", (long)size, got);
        check(rbuf, size, it, 0);
        fill(sbuf, size, it, 1);
        MPI_Send(sbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
      }
    }
    const double dt = MPI_Wtime() - t0;
    if (rank == 0) printf("pingpong %zu %d %.2f %.2f\n", size, n, dt / n / 2 * 1e6, 2.0 * (double)size * n / dt / 1e6);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

static void allreduce(int n) {
  double* in = malloc(sizeof(double) * (size_t)n);
  double* out = malloc(sizeof(double) * (size_t)n);
  if (in == NULL || out == NULL) fail("out of memory (elements, 0)", n, 0);
  for (int i = 0; i < n; i++) in[i] = (double)(rank + 1) * (double)(i % 1000 + 1);
  MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double ranks_sum = (double)nranks * (nranks + 1) / 2;
  for (int i = 0; i < n; i++)
    if (out[i] != ranks_sum * (double)(i % 1000 + 1)) fail("allreduce sum differs at (elements, index)", n, i);
  if (rank == 0) printf("allreduce %d ok\n", n);
  free(in);
  free(out);
}

/*
 * One-sided: a window of `n` bytes per rank (MPI_Win_allocate: with pml ucx, osc ucx maps it
 * through UCP); each rank PUTs its pattern into the next rank's window, then GETs the window of
 * the rank before it, both checked, between fences.
 */
static void rma(int n) {
  uint8_t* base = NULL;
  MPI_Win win;
  MPI_Win_allocate(n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  uint8_t* mine = malloc((size_t)n);
  uint8_t* got = malloc((size_t)n);
  if (mine == NULL || got == NULL) fail("out of memory (bytes, 0)", n, 0);
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  fill(mine, (size_t)n, rank, 2);
  MPI_Win_fence(0, win);
  MPI_Put(mine, n, MPI_BYTE, next, 0, n, MPI_BYTE, win);
  MPI_Win_fence(0, win);
  check(base, (size_t)n, prev, 2); /* what the rank before put here */
  MPI_Get(got, n, MPI_BYTE, prev, 0, n, MPI_BYTE, win);
  MPI_Win_fence(0, win);
  check(got, (size_t)n, (prev + nranks - 1) % nranks, 2); /* what its own previous rank put there */
  if (rank == 0) printf("rma %d ok\n", n);
  MPI_Win_free(&win);
  free(mine);
  free(got);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks < 2) fail("needs at least 2 ranks (ranks, 0)", nranks, 0);
  const char* tls = getenv("UCX_TLS");
  printf("rank %d UCX_TLS=%s\n", rank, tls != NULL ? tls : "(unset)");
  fflush(stdout);
  uint8_t* sbuf = malloc(MAX_SIZE);
  uint8_t* rbuf = malloc(MAX_SIZE);
  if (sbuf == NULL || rbuf == NULL) fail("out of memory (bytes, 0)", MAX_SIZE, 0);
  pingpong(sbuf, rbuf);
  allreduce(1);
  allreduce(65536);
  rma(65536);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi-check: ok %d\n", nranks);
  fflush(stdout);
  free(sbuf);
  free(rbuf);
  MPI_Finalize();
  return 0;
}
