/*
 * A small libibverbs program for test/verbs-lib.test.ts: registers an unaligned buffer it filled
 * and then answers commands on stdin, so the test can check that the daemon sees the program's
 * memory and the program the daemon's writes. Linked against libibverbs like any verbs program;
 * run with librdmagraph-verbs.so preloaded.
 *
 *   stdout, once registered:  "mr HANDLE stag STAG offset OFF length LEN pd PD"
 *   stdin:  "show OFF LEN" -> the bytes as hex; "dereg" -> "dereg 0"; "dealloc" -> "dealloc 0"
 */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    fprintf(stderr, "no device\n");
    return 2;
  }
  struct ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == NULL) return perror("ibv_open_device"), 3;
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == NULL) return perror("ibv_alloc_pd"), 4;
  const size_t len = 10000;
  uint8_t* block = malloc(len + 200);
  uint8_t* buf = block + 100; /* not page aligned */
  for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(i * 7 + 3);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (mr == NULL) return perror("ibv_reg_mr"), 5;
  /* The daemon's MR starts at the page that holds buf. */
  unsigned long off = (unsigned long)((uintptr_t)buf & (uintptr_t)(sysconf(_SC_PAGESIZE) - 1));
  for (size_t i = 0; i < len; i++)
    if (buf[i] != (uint8_t)(i * 7 + 3)) return fprintf(stderr, "contents changed by the registration at %zu\n", i), 6;
  printf("mr %u stag %u offset %lu length %zu pd %u\n", mr->handle, mr->rkey, off, len, pd->handle);
  char line[256];
  while (fgets(line, sizeof line, stdin) != NULL) {
    unsigned long o, l;
    if (sscanf(line, "show %lu %lu", &o, &l) == 2 && o + l <= len) {
      for (unsigned long i = 0; i < l; i++) printf("%02x", buf[o + i]);
      printf("\n");
    } else if (strncmp(line, "dereg", 5) == 0) {
      printf("dereg %d\n", ibv_dereg_mr(mr));
    } else if (strncmp(line, "dealloc", 7) == 0) {
      printf("dealloc %d\n", ibv_dealloc_pd(pd));
    } else if (strncmp(line, "exit", 4) == 0) {
      break;
    }
  }
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
