/*
 * The extended verbs, as a program using them would: test/verbs-ex.test.ts runs it against one
 * daemon (librdmagraph-verbs.so preloaded). Two RC QPs made with ibv_create_qp_ex on one device,
 * connected to each other (loopback), CQs made with ibv_create_cq_ex and polled with
 * ibv_start_poll / ibv_next_poll / ibv_end_poll; every ibv_wr_* opcode the device has, each
 * data setter, a batch, wr_abort, an operation it does not have; ibv_query_device_ex;
 * ibv_rereg_mr (access, translation). Each check prints "ok NAME" or "FAIL NAME: why"; the
 * program exits 0 when every check passed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs-tool.h"

struct done {
  int got;
  uint64_t wr_id;
  enum ibv_wc_status status;
  enum ibv_wc_opcode opcode;
  uint32_t byte_len, qp_num, imm;
  unsigned flags;
};

/* One completion from an extended CQ within 5 s, read through the read_* ops. */
static struct done one(struct ibv_cq_ex* cq) {
  struct done d = {0};
  struct ibv_poll_cq_attr attr = {0};
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int r = ibv_start_poll(cq, &attr);
    if (r == 0) break;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (r != ENOENT || t.tv_sec - t0.tv_sec >= 5) return d;
  }
  d.got = 1;
  d.wr_id = cq->wr_id;
  d.status = cq->status;
  d.opcode = ibv_wc_read_opcode(cq);
  d.byte_len = ibv_wc_read_byte_len(cq);
  d.qp_num = ibv_wc_read_qp_num(cq);
  d.flags = ibv_wc_read_wc_flags(cq);
  d.imm = d.flags & IBV_WC_WITH_IMM ? ntohl(ibv_wc_read_imm_data(cq)) : 0;
  ibv_end_poll(cq);
  return d;
}

/* Nothing on the CQ for 100 ms. */
static int none(struct ibv_cq_ex* cq) {
  struct ibv_poll_cq_attr attr = {0};
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    if (ibv_start_poll(cq, &attr) == 0) {
      ibv_end_poll(cq);
      return 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 100);
  return 1;
}

/*
 * The next async event within `ms`, taken as UCX takes them: only once poll says the async fd
 * is readable (the daemon wrote it), then ibv_get_async_event, non-blocking. 1, or 0 on none.
 */
static int next_async(struct ibv_context* ctx, struct ibv_async_event* ev, int ms) {
  fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    int left = ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
    if (left <= 0) return 0;
    struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
    if (poll(&p, 1, left) != 1) continue;
    if (ibv_get_async_event(ctx, ev) == 0) {
      ibv_ack_async_event(ev);
      return 1;
    }
    if (errno != EAGAIN) return 0;
  }
}

static void recv_one(struct ibv_qp* qp, struct ibv_mr* mr, void* at, uint32_t len, uint64_t id) {
  struct ibv_sge s = {.addr = (uintptr_t)at, .length = len, .lkey = mr->lkey};
  struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
  if (ibv_post_recv(qp, &w, &bad)) printf("FAIL post_recv: %d\n", errno), failures++;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* why = NULL;
  struct ibv_context* ctx = open_first_device(&why);
  if (ctx == NULL) return fprintf(stderr, "%s\n", why), 2;

  struct ibv_device_attr_ex dx;
  struct ibv_device_attr d;
  int rc = ibv_query_device_ex(ctx, NULL, &dx);
  ibv_query_device(ctx, &d);
  CHECK("query_device_ex",
        rc == 0 && dx.phys_port_cnt_ex == d.phys_port_cnt && dx.orig_attr.vendor_id != 0 &&
            dx.orig_attr.max_qp == d.max_qp && dx.orig_attr.max_mr_size == d.max_mr_size,
        "rc %d phys_port_cnt_ex %u/%u vendor_id %u", rc, dx.phys_port_cnt_ex, d.phys_port_cnt, dx.orig_attr.vendor_id);

  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  const uint64_t wcf = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
  struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = wcf};
  struct ibv_cq_ex* cqa = ibv_create_cq_ex(ctx, &ca);
  struct ibv_cq_ex* cqb = ibv_create_cq_ex(ctx, &ca);
  struct ibv_cq_init_attr_ex ts = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
  errno = 0;
  struct ibv_cq_ex* cqt = ibv_create_cq_ex(ctx, &ts);
  CHECK("create_cq_ex", cqa != NULL && cqb != NULL && cqt == NULL && errno == EOPNOTSUPP,
        "cqs %p %p, timestamps: %p errno %d", (void*)cqa, (void*)cqb, (void*)cqt, errno);
  if (cqa == NULL || cqb == NULL || pd == NULL) return 4;

  const uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
                       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                       IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
  struct ibv_qp* qp[2];
  for (int i = 0; i < 2; i++) {
    struct ibv_qp_init_attr_ex qa = {
        .send_cq = ibv_cq_ex_to_cq(i ? cqb : cqa),
        .recv_cq = ibv_cq_ex_to_cq(i ? cqb : cqa),
        .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 4, .max_recv_sge = 4, .max_inline_data = 64},
        .qp_type = IBV_QPT_RC,
        .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        .pd = pd,
        .send_ops_flags = ops};
    qp[i] = ibv_create_qp_ex(ctx, &qa);
  }
  struct ibv_qp_init_attr_ex bad_ops = {
      .send_cq = ibv_cq_ex_to_cq(cqa),
      .recv_cq = ibv_cq_ex_to_cq(cqa),
      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = pd,
      .send_ops_flags = IBV_QP_EX_WITH_TSO};
  errno = 0;
  struct ibv_qp* nope = ibv_create_qp_ex(ctx, &bad_ops);
  CHECK("create_qp_ex",
        qp[0] != NULL && qp[1] != NULL && ibv_qp_to_qp_ex(qp[0]) != NULL && nope == NULL && errno == EOPNOTSUPP,
        "qps %p %p, tso: %p errno %d", (void*)qp[0], (void*)qp[1], (void*)nope, errno);
  if (qp[0] == NULL || qp[1] == NULL) return 5;
  union ibv_gid gid;
  ibv_query_gid(ctx, 1, 0, &gid);
  CHECK("connect (loopback)",
        connect_rc(qp[0], qp[1]->qp_num, &gid, 100) == 0 && connect_rc(qp[1], qp[0]->qp_num, &gid, 100) == 0,
        "errno %d", errno);
  struct ibv_qp_ex* x = ibv_qp_to_qp_ex(qp[0]);

  enum { LEN = 1 << 16 };
  uint8_t* a = calloc(1, LEN);
  uint8_t* b = calloc(1, LEN);
  const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  struct ibv_mr* ma = ibv_reg_mr(pd, a, LEN, all);
  struct ibv_mr* mb = ibv_reg_mr(pd, b, LEN, all | IBV_ACCESS_RELAXED_ORDERING);
  CHECK("reg_mr (relaxed ordering accepted)", ma != NULL && mb != NULL, "errno %d", errno);
  if (ma == NULL || mb == NULL) return 6;
  for (int i = 0; i < 4096; i++) a[i] = (uint8_t)(i * 13 + 1);

  /* SEND with one SGE, then one from a list of three, then inline, then an inline list. */
  recv_one(qp[1], mb, b, 4096, 11);
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 1000);
  rc = ibv_wr_complete(x);
  struct done s = one(cqa), r = one(cqb);
  CHECK("wr_send + wr_set_sge",
        rc == 0 && s.got && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_SEND && s.wr_id == 1 && r.got &&
            r.opcode == IBV_WC_RECV && r.byte_len == 1000 && r.wr_id == 11 && r.qp_num == qp[1]->qp_num &&
            memcmp(a, b, 1000) == 0,
        "rc %d send %d/%d/%d recv %d/%d/%u", rc, s.got, s.status, s.opcode, r.got, r.opcode, r.byte_len);

  memset(b, 0, LEN);
  recv_one(qp[1], mb, b, 4096, 12);
  struct ibv_sge sl[3] = {
      {(uintptr_t)a, 100, ma->lkey}, {(uintptr_t)a + 500, 200, ma->lkey}, {(uintptr_t)a + 1000, 300, ma->lkey}};
  ibv_wr_start(x);
  x->wr_id = 2;
  ibv_wr_send(x);
  ibv_wr_set_sge_list(x, 3, sl);
  rc = ibv_wr_complete(x);
  s = one(cqa), r = one(cqb);
  CHECK("wr_send + wr_set_sge_list",
        rc == 0 && s.got && s.wr_id == 2 && r.got && r.byte_len == 600 && memcmp(b, a, 100) == 0 &&
            memcmp(b + 100, a + 500, 200) == 0 && memcmp(b + 300, a + 1000, 300) == 0,
        "rc %d recv %d len %u", rc, r.got, r.byte_len);

  memset(b, 0, LEN);
  recv_one(qp[1], mb, b, 4096, 13);
  recv_one(qp[1], mb, b + 100, 4096, 14);
  char text[] = "inline bytes, copied at the call";
  struct ibv_data_buf bufs[2] = {{"first,", 6}, {"second", 6}};
  ibv_wr_start(x);
  x->wr_id = 3;
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, text, sizeof text);
  memset(text, 'X', sizeof text - 1); /* after the call: what was sent is what it was then */
  x->wr_id = 4;
  ibv_wr_send(x);
  ibv_wr_set_inline_data_list(x, 2, bufs);
  rc = ibv_wr_complete(x);
  struct done s1 = one(cqa), s2 = one(cqa), r1 = one(cqb), r2 = one(cqb);
  CHECK("wr_set_inline_data + _list, two WRs in one batch",
        rc == 0 && s1.wr_id == 3 && s2.wr_id == 4 && r1.byte_len == 33 && r2.byte_len == 12 &&
            strcmp((char*)b, "inline bytes, copied at the call") == 0 && memcmp(b + 100, "first,second", 12) == 0,
        "rc %d s %lu %lu r %u %u b '%s'", rc, (unsigned long)s1.wr_id, (unsigned long)s2.wr_id, r1.byte_len,
        r2.byte_len, (char*)b);

  /* RDMA WRITE, WRITE with immediate, READ. */
  memset(b, 0, LEN);
  ibv_wr_start(x);
  x->wr_id = 5;
  ibv_wr_rdma_write(x, mb->rkey, (uintptr_t)b + 64);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 4000);
  rc = ibv_wr_complete(x);
  s = one(cqa);
  CHECK("wr_rdma_write",
        rc == 0 && s.got && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_RDMA_WRITE && memcmp(b + 64, a, 4000) == 0,
        "rc %d status %d", rc, s.status);

  recv_one(qp[1], mb, b + 8192, 16, 15);
  ibv_wr_start(x);
  x->wr_id = 6;
  ibv_wr_rdma_write_imm(x, mb->rkey, (uintptr_t)b + 5000, htonl(0x1234abcd));
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a + 7, 300);
  rc = ibv_wr_complete(x);
  s = one(cqa), r = one(cqb);
  CHECK("wr_rdma_write_imm (read_imm_data)",
        rc == 0 && s.got && s.status == IBV_WC_SUCCESS && r.got && r.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
            (r.flags & IBV_WC_WITH_IMM) && r.imm == 0x1234abcd && memcmp(b + 5000, a + 7, 300) == 0,
        "rc %d recv %d opcode %d flags %u imm %x", rc, r.got, r.opcode, r.flags, r.imm);

  /* SEND with immediate: the receive completes as IBV_WC_RECV with the immediate. */
  recv_one(qp[1], mb, b + 9000, 4096, 19);
  ibv_wr_start(x);
  x->wr_id = 20;
  ibv_wr_send_imm(x, htonl(0xfeed0042));
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a + 11, 2500);
  rc = ibv_wr_complete(x);
  s = one(cqa), r = one(cqb);
  CHECK("wr_send_imm (IBV_WC_RECV with IBV_WC_WITH_IMM)",
        rc == 0 && s.got && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_SEND && r.got && r.opcode == IBV_WC_RECV &&
            (r.flags & IBV_WC_WITH_IMM) && r.imm == 0xfeed0042 && r.byte_len == 2500 && r.wr_id == 19 &&
            memcmp(b + 9000, a + 11, 2500) == 0,
        "rc %d recv %d opcode %d flags %u imm %x len %u", rc, r.got, r.opcode, r.flags, r.imm, r.byte_len);

  for (int i = 0; i < 2048; i++) b[20000 + i] = (uint8_t)(i * 3 + 5);
  ibv_wr_start(x);
  x->wr_id = 7;
  ibv_wr_rdma_read(x, mb->rkey, (uintptr_t)b + 20000);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a + 30000, 2048);
  rc = ibv_wr_complete(x);
  s = one(cqa);
  CHECK(
      "wr_rdma_read",
      rc == 0 && s.got && s.opcode == IBV_WC_RDMA_READ && s.byte_len == 2048 && memcmp(a + 30000, b + 20000, 2048) == 0,
      "rc %d status %d", rc, s.status);

  /* Atomics on an 8-byte word of b: the old value comes back in a. */
  uint64_t* word = (uint64_t*)(b + 40000);
  uint64_t* old = (uint64_t*)(a + 40000);
  *word = 1000;
  ibv_wr_start(x);
  x->wr_id = 8;
  ibv_wr_atomic_fetch_add(x, mb->rkey, (uintptr_t)word, 5);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)old, 8);
  rc = ibv_wr_complete(x);
  s = one(cqa);
  CHECK("wr_atomic_fetch_add", rc == 0 && s.got && s.opcode == IBV_WC_FETCH_ADD && *old == 1000 && *word == 1005,
        "rc %d old %lu word %lu", rc, (unsigned long)*old, (unsigned long)*word);
  ibv_wr_start(x);
  x->wr_id = 9;
  ibv_wr_atomic_cmp_swp(x, mb->rkey, (uintptr_t)word, 1005, 77);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)old, 8);
  rc = ibv_wr_complete(x);
  s = one(cqa);
  CHECK("wr_atomic_cmp_swp", rc == 0 && s.got && s.opcode == IBV_WC_COMP_SWAP && *old == 1005 && *word == 77,
        "rc %d old %lu word %lu", rc, (unsigned long)*old, (unsigned long)*word);

  /* wr_abort posts nothing; an operation the device does not have fails the whole batch. */
  ibv_wr_start(x);
  x->wr_id = 10;
  ibv_wr_rdma_write(x, mb->rkey, (uintptr_t)b);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 8);
  ibv_wr_abort(x);
  CHECK("wr_abort", none(cqa), "a completion appeared");
  ibv_wr_start(x);
  ibv_wr_rdma_write(x, mb->rkey, (uintptr_t)b);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 8);
  char hdr[64] = {0};
  ibv_wr_send_tso(x, hdr, sizeof hdr, 1000);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 8);
  rc = ibv_wr_complete(x);
  CHECK("wr_send_tso: EOPNOTSUPP, nothing of the batch posted", rc == EOPNOTSUPP && none(cqa), "rc %d", rc);
  ibv_wr_start(x);
  ibv_wr_send(x);
  rc = ibv_wr_complete(x);
  CHECK("a wr_<op> without its data: EINVAL", rc == EINVAL && none(cqa), "rc %d", rc);

  /* ibv_rereg_mr: access (remote write off: a WRITE through it fails), then translation. */
  struct ibv_mr* mc = ibv_reg_mr(pd, b + 50000, 1000, all);
  rc = ibv_rereg_mr(mc, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  CHECK("rereg_mr access", rc == 0, "rc %d errno %d", rc, errno);
  rc = ibv_rereg_mr(mc, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b + 52000, 500, 0);
  for (int i = 0; i < 500; i++) b[52000 + i] = (uint8_t)(i + 9);
  ibv_wr_start(x);
  x->wr_id = 18;
  ibv_wr_rdma_read(x, mc->rkey, (uintptr_t)b + 52000);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a + 50000, 500);
  int rc2 = ibv_wr_complete(x);
  s = one(cqa);
  CHECK("rereg_mr translation (READ through the new rkey)",
        rc == 0 && rc2 == 0 && s.got && s.status == IBV_WC_SUCCESS && memcmp(a + 50000, b + 52000, 500) == 0 &&
            mc->addr == b + 52000 && mc->length == 500,
        "rc %d %d status %d", rc, rc2, s.status);

  /* What the device has not: each fails with EOPNOTSUPP (and the library says which, by name). */
  struct ibv_xrcd_init_attr xa = {
      .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = 0};
  errno = 0;
  struct ibv_xrcd* xrcd = ibv_open_xrcd(ctx, &xa);
  int e2 = errno;
  errno = 0;
  struct ibv_mr* odp = ibv_reg_mr(pd, b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  int e3 = errno;
  CHECK("unsupported: open_xrcd, ODP", xrcd == NULL && e2 == EOPNOTSUPP && odp == NULL && e3 == EOPNOTSUPP,
        "xrcd %p %d odp %p %d", (void*)xrcd, e2, (void*)odp, e3);

  /* Last, as it ends the QP: SEND with invalidate of a plain MR's rkey. Verbs has no access flag
     that lets a peer invalidate an MR (only memory windows and fast-registered MRs can be), so
     the receiver refuses it as a NIC does: remote access error at the sender, the receive
     flushed, the QPs in error. */
  recv_one(qp[1], mb, b, 4096, 16);
  ibv_wr_start(x);
  x->wr_id = 17;
  ibv_wr_send_inv(x, mb->rkey);
  ibv_wr_set_sge(x, ma->lkey, (uintptr_t)a, 10);
  rc = ibv_wr_complete(x);
  s = one(cqa), r = one(cqb);
  CHECK("wr_send_inv", rc == 0 && s.got && s.wr_id == 17 && s.status == IBV_WC_REM_ACCESS_ERR && r.got,
        "rc %d send %d/%d recv %d/%d flags %u", rc, s.got, s.status, r.got, r.status, r.flags);

  /* Async events. The failed Send with Invalidate put both QPs in ERROR: that was said by their
     completions, as a NIC says a transport error; no async event. */
  struct ibv_async_event ev;
  CHECK("async: none for QPs a completion error ended", !next_async(ctx, &ev, 500), "event %d", ev.event_type);

  /* A QP on an SRQ the program moves to ERROR (the drain before destroy): LAST_WQE_REACHED. */
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
  struct ibv_srq* srq = ibv_create_srq(pd, &sa);
  struct ibv_qp_init_attr_ex da = {.send_cq = ibv_cq_ex_to_cq(cqa),
                                   .recv_cq = ibv_cq_ex_to_cq(cqa),
                                   .srq = srq,
                                   .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
                                   .qp_type = IBV_QPT_RC,
                                   .comp_mask = IBV_QP_INIT_ATTR_PD,
                                   .pd = pd};
  struct ibv_qp* qd = srq == NULL ? NULL : ibv_create_qp_ex(ctx, &da);
  struct ibv_qp_attr ea = {.qp_state = IBV_QPS_ERR};
  rc = qd == NULL ? -1 : ibv_modify_qp(qd, &ea, IBV_QP_STATE);
  int got = rc == 0 && next_async(ctx, &ev, 3000);
  CHECK("async: IBV_EVENT_QP_LAST_WQE_REACHED for an SRQ's QP in ERROR",
        got && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == qd, "rc %d got %d event %d", rc, got,
        ev.event_type);
  CHECK("async: each event once", !next_async(ctx, &ev, 300), "event %d", ev.event_type);

  /* A CQ that overflows: IBV_EVENT_CQ_ERR. Two fresh QPs, the sender's CQ of one entry. */
  struct ibv_cq* tiny = ibv_create_cq(ctx, 1, NULL, NULL, 0);
  struct ibv_cq* big = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_qp_init_attr ta = {.send_cq = tiny,
                                .recv_cq = big,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
                                .qp_type = IBV_QPT_RC};
  struct ibv_qp* qe = ibv_create_qp(pd, &ta);
  ta.send_cq = big;
  struct ibv_qp* qf = ibv_create_qp(pd, &ta);
  int ok = tiny && big && qe && qf && connect_rc(qe, qf->qp_num, &gid, 100) == 0 &&
           connect_rc(qf, qe->qp_num, &gid, 100) == 0;
  for (int i = 0; ok && i < 6; i++) {
    struct ibv_sge sg = {(uintptr_t)a, 8, ma->lkey};
    struct ibv_send_wr w = {.wr_id = 100 + i,
                            .sg_list = &sg,
                            .num_sge = 1,
                            .opcode = IBV_WR_RDMA_WRITE,
                            .send_flags = IBV_SEND_SIGNALED,
                            .wr.rdma = {(uintptr_t)b, mb->rkey}},
                       *badw;
    ok = ibv_post_send(qe, &w, &badw) == 0;
  }
  got = ok && next_async(ctx, &ev, 3000);
  CHECK("async: IBV_EVENT_CQ_ERR for a CQ that overflowed",
        got && ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == tiny, "ok %d got %d event %d", ok, got,
        ev.event_type);

  /* The link going down (the test closes the peer): IBV_EVENT_PORT_ERR, and ibv_query_port says so. */
  CHECK("async: nothing more before the link goes down", !next_async(ctx, &ev, 300), "event %d", ev.event_type);
  printf("waiting for the link to go down\n");
  got = next_async(ctx, &ev, 10000);
  struct ibv_port_attr pa;
  int qrc = ibv_query_port(ctx, 1, &pa);
  CHECK("async: IBV_EVENT_PORT_ERR when the link goes down",
        got && ev.event_type == IBV_EVENT_PORT_ERR && ev.element.port_num == 1 && qrc == 0 && pa.state == IBV_PORT_DOWN,
        "got %d event %d port state %d", got, ev.event_type, pa.state);

  /* The daemon going away: IBV_EVENT_DEVICE_FATAL, to a program blocked in ibv_get_async_event. */
  fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) & ~O_NONBLOCK);
  printf("waiting for the daemon to go away\n");
  rc = ibv_get_async_event(ctx, &ev);
  CHECK("async: IBV_EVENT_DEVICE_FATAL when the daemon goes away", rc == 0 && ev.event_type == IBV_EVENT_DEVICE_FATAL,
        "rc %d event %d", rc, ev.event_type);

  printf("done %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
