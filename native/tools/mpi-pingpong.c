/*
 * An MPI ping-pong for bench/mpi.ts (compiled there with Open MPI's mpicc): rank 0 and the last
 * rank bounce one message of each SIZE given, for about SECONDS each, after WARMUP untimed round
 * trips. The data is not checked here (test/verbs-mpi.test.ts's mpi-check does that): the timed
 * loop is MPI_Send and MPI_Recv only. Rank 0 ends the loop by tagging its last message STOP, so
 * no extra message is timed. Rank 0 prints one line per size:
 *
 *   pingpong SIZE ROUND_TRIPS half_round_trip_us MB/s
 *
 * (MB/s: 2 x SIZE x ROUND_TRIPS over the time, 10^6 bytes), then "mpi-pingpong: ok".
 *
 *   mpi-pingpong SECONDS WARMUP SIZE...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GO = 1, STOP = 2, MAX_ROUND_TRIPS = 10000000 };

static int rank, nranks;

/*
 * Rank 0 says why and aborts the job. The other ranks (which see the same arguments) wait for
 * that abort to end them: aborting themselves could kill rank 0 before its line is out.
 */
static void usage(const char* why) {
  if (rank == 0) {
    fprintf(stderr, "mpi-pingpong: %s (usage: mpi-pingpong SECONDS WARMUP SIZE...)\n", why);
    fflush(stderr);
  } else {
    MPI_Barrier(MPI_COMM_WORLD); /* never completes: rank 0 aborts */
  }
  MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Round trips of `size` bytes until rank 0 has spent `seconds` (it decides; the peer follows). */
static void pingpong(char* buf, int size, double seconds, int warmup) {
  const int peer = rank == 0 ? nranks - 1 : 0;
  MPI_Status st;
  if (rank == 0) {
    for (int i = 0; i < warmup; i++) {
      MPI_Send(buf, size, MPI_BYTE, peer, GO, MPI_COMM_WORLD);
      MPI_Recv(buf, size, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    }
    int n = 0;
    const double t0 = MPI_Wtime();
    double t = t0;
    for (int last = 0; !last;) {
      last = t - t0 >= seconds || n + 1 >= MAX_ROUND_TRIPS;
      MPI_Send(buf, size, MPI_BYTE, peer, last ? STOP : GO, MPI_COMM_WORLD);
      MPI_Recv(buf, size, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      n++;
      t = MPI_Wtime();
    }
    const double dt = t - t0;
    printf("pingpong %d %d %.2f %.2f\n", size, n, dt / n / 2 * 1e6, 2.0 * size * n / dt / 1e6);
    fflush(stdout);
  } else if (rank == nranks - 1) {
    for (int i = 0; i < warmup; i++) {
      MPI_Recv(buf, size, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      MPI_Send(buf, size, MPI_BYTE, peer, GO, MPI_COMM_WORLD);
    }
    for (int stop = 0; !stop;) {
      MPI_Recv(buf, size, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      stop = st.MPI_TAG == STOP;
      MPI_Send(buf, size, MPI_BYTE, peer, GO, MPI_COMM_WORLD);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks < 2) usage("needs at least 2 ranks");
  if (argc < 4) usage("needs SECONDS, WARMUP and at least one SIZE");
  char* end;
  const double seconds = strtod(argv[1], &end);
  if (*end != '\0' || !(seconds > 0 && seconds <= 3600)) usage("SECONDS must be a number in (0, 3600]");
  const long warmup = strtol(argv[2], &end, 10);
  if (*end != '\0' || warmup < 0 || warmup > 1000000) usage("WARMUP must be an integer in 0..1000000");
  long max = 0;
  for (int i = 3; i < argc; i++) {
    const long size = strtol(argv[i], &end, 10);
    if (*end != '\0' || size < 1 || size > (1L << 30)) usage("each SIZE must be an integer in 1..2^30");
    if (size > max) max = size;
  }
  char* buf = malloc((size_t)max);
  if (buf == NULL) usage("out of memory");
  memset(buf, 0x5a, (size_t)max);
  for (int i = 3; i < argc; i++) pingpong(buf, (int)strtol(argv[i], NULL, 10), seconds, (int)warmup);
  if (rank == 0) printf("mpi-pingpong: ok\n");
  fflush(stdout);
  free(buf);
  MPI_Finalize();
  return 0;
}
