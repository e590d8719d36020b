/* SPDX-License-Identifier: MIT */
/*
 * injector/analyze/findings.c: each rule on synthetic windows, including the two wait-based rules
 * (SyncCheckpoint, DataLoaderStall) fed with hand-made thread waits, and what must NOT fire.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "injector/analyze/analysis.h"
#include "injector/analyze/findings.h"
#include "tests/unit/synth_profile.h"

#define T0 (1000 * MS)
#define WIN (1000 * MS)
#define TID 11

static struct findings *run(struct synth *s, struct wait_list *w)
{
	struct analysis_opts o;
	struct analysis *a = NULL;
	struct findings *f = NULL;

	findings_analysis_opts(&o);
	assert_int_equal(analysis__new(&s->p, &o, &a), 0);
	assert_int_equal(findings__run(&s->p, a, w, "eBPF off in this test", &f), 0);
	analysis__free(a);
	return f;
}

static size_t count(const struct findings *f, const char *cat, enum finding_severity min)
{
	size_t n = 0;

	for (size_t i = 0; i < f->n; i++)
		if (strcmp(f->v[i].category, cat) == 0 && f->v[i].severity >= min)
			n++;
	return n;
}

static size_t count_at_least(const struct findings *f, enum finding_severity min)
{
	size_t n = 0;

	for (size_t i = 0; i < f->n; i++)
		n += f->v[i].severity >= min;
	return n;
}

static const struct evidence *ev(const struct finding *x, const char *key)
{
	for (size_t k = 0; k < x->nev; k++)
		if (strcmp(x->ev[k].key, key) == 0)
			return &x->ev[k];
	fail_msg("no evidence %s", key);
	return NULL;
}

/* a training thread: four launches and a 4 ms stream sync every 20 ms */
static void training(struct synth *s, uint32_t tid)
{
	synth_thread(&s->t[0], tid, "train");
	synth_string(&s->t[0], 1, "gemm");
	for (uint64_t t = 0; t + 20 * MS <= WIN; t += 20 * MS) {
		for (uint64_t k = 0; k < 4; k++)
			synth_launch(&s->t[0], tid, T0 + t + k * 10000, 5000, 1, 65536, 256, 0);
		synth_sync(&s->t[0], tid, T0 + t + 10 * MS, 4 * MS, false);
	}
}

static void add_wait(struct wait_list *l, uint32_t tid, uint64_t ts, uint64_t dur,
		     enum wait_kind kind, const char *name, const char *path, char state)
{
	struct thread_wait w = { .pid = 1000, .tid = tid, .ts = ts, .dur = dur, .kind = kind,
				 .name = name, .path = path, .bytes = 65536, .state = state };

	assert_int_equal(findings_add_waits(l, &w, 1), 0);
}

static void test_clean_window(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	f = run(&s, &w);
	assert_int_equal(f->n, 0);
	assert_true(f->waits_known);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

static void test_wait_classes(void **state)
{
	struct thread_wait w = { .kind = WAIT_SYSCALL, .name = "fsync" };

	assert_int_equal(findings_wait_class(&w), WC_FILE_WRITE);
	w.name = "write";
	w.path = "/data/ckpt.pt";
	assert_int_equal(findings_wait_class(&w), WC_FILE_WRITE);
	w.path = "pipe:[1234]";
	assert_int_equal(findings_wait_class(&w), WC_OTHER);
	w.path = "/dev/null";
	assert_int_equal(findings_wait_class(&w), WC_OTHER);
	w.name = "read";
	assert_int_equal(findings_wait_class(&w), WC_DATA_WAIT);
	w.name = "futex";
	w.path = NULL;
	assert_int_equal(findings_wait_class(&w), WC_DATA_WAIT);
	w.name = "clock_nanosleep";
	assert_int_equal(findings_wait_class(&w), WC_OTHER);
	w.kind = WAIT_OFFCPU;
	w.name = "read";
	w.state = 'R';
	assert_int_equal(findings_wait_class(&w), WC_PREEMPTED);
}

/* 25 checkpoints of 8 ms in fsync + 2 ms in write: 250 ms of 1 s, while the GPU idles */
static void test_sync_checkpoint(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;
	const struct finding *x;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	for (uint64_t t = 0; t < WIN; t += 40 * MS) {
		add_wait(&w, TID, T0 + t + 14 * MS + 500000, 2 * MS, WAIT_SYSCALL, "write", "/ckpt/model.pt", 0);
		add_wait(&w, TID, T0 + t + 16 * MS + 500000, 2 * MS, WAIT_SYSCALL, "fsync", "/ckpt/model.pt", 0);
		/* the off-CPU view of the same fsync: counted once */
		add_wait(&w, TID, T0 + t + 16 * MS + 600000, 1800000, WAIT_OFFCPU, "fsync", NULL, 'D');
	}
	f = run(&s, &w);
	assert_int_equal(count(f, "SyncCheckpoint", SEV_WARNING), 1);
	assert_int_equal(count_at_least(f, SEV_WARNING), 1);
	x = &f->v[0];
	assert_int_equal(x->tid, TID);
	assert_int_equal(ev(x, "blocked_ms")->d, 100.0);
	assert_true(ev(x, "share_of_window")->d >= 0.099 && ev(x, "share_of_window")->d <= 0.101);
	assert_int_equal(ev(x, "flushes")->u, 25);
	assert_int_equal(ev(x, "bytes_in_slow_writes")->u, 25 * 65536);
	assert_non_null(strstr(ev(x, "top_wait")->s, "/ckpt/model.pt"));
	assert_non_null(x->remedy);
	/* 10% is a warning, not critical */
	assert_int_equal(x->severity, SEV_WARNING);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

/* The slow-syscall records of a few of the fsyncs (the rest over the record rate) and an
 * off-CPU block for each: the off-CPU blocks add up to more, but the top wait is still the
 * file the records name (it was "fsync" alone in one CI run of four) */
static void test_sync_checkpoint_top_wait_from_records(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;
	const struct finding *x;
	int i = 0;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	for (uint64_t t = 0; t < WIN; t += 40 * MS, i++) {
		if (i % 3 == 0)
			add_wait(&w, TID, T0 + t + 14 * MS + 500000, 5 * MS, WAIT_SYSCALL, "fsync", "/ckpt/model.pt", 0);
		add_wait(&w, TID, T0 + t + 14 * MS + 600000, 4800000, WAIT_OFFCPU, "fsync", NULL, 'D');
	}
	f = run(&s, &w);
	assert_int_equal(count(f, "SyncCheckpoint", SEV_WARNING), 1);
	x = &f->v[0];
	assert_string_equal(ev(x, "top_wait")->s, "fsync /ckpt/model.pt");
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

/* the same writes inside the thread's own CUDA sync (it waits for the GPU) do not count;
 * writes to a pipe are not checkpoints; a thread that never launches is not training */
static void test_sync_checkpoint_negatives(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	synth_thread(&s.t[0], 99, "saver");
	for (uint64_t t = 0; t < WIN; t += 20 * MS) {
		add_wait(&w, TID, T0 + t + 10 * MS + 500000, 3 * MS, WAIT_SYSCALL, "fsync", "/ckpt/a", 0);
		add_wait(&w, TID, T0 + t + 15 * MS, 4 * MS, WAIT_SYSCALL, "write", "pipe:[77]", 0);
		add_wait(&w, 99, T0 + t, 15 * MS, WAIT_SYSCALL, "fsync", "/ckpt/b", 0);
	}
	f = run(&s, &w);
	assert_int_equal(count(f, "SyncCheckpoint", SEV_INFO), 0);
	assert_int_equal(f->n, 0);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

/* reads from the loader's pipe: 5 ms of every 20 ms step (25%) */
static void test_dataloader_stall(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;
	const struct finding *x;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	for (uint64_t t = 0; t + 20 * MS <= WIN; t += 20 * MS) {
		add_wait(&w, TID, T0 + t + 14 * MS + 500000, 5 * MS, WAIT_SYSCALL, "read", "pipe:[5]", 0);
		add_wait(&w, TID, T0 + t + 14 * MS + 600000, 4800000, WAIT_OFFCPU, "read", NULL, 'S');
	}
	f = run(&s, &w);
	assert_int_equal(count(f, "DataLoaderStall", SEV_WARNING), 1);
	assert_int_equal(count_at_least(f, SEV_WARNING), 1);
	x = &f->v[0];
	assert_string_equal(x->category, "DataLoaderStall");
	assert_int_equal(x->severity, SEV_WARNING);
	assert_int_equal(ev(x, "waits")->u, 50);
	assert_true(ev(x, "median_wait_ms")->d > 4.9 && ev(x, "median_wait_ms")->d < 5.1);
	assert_string_equal(ev(x, "top_wait")->s, "read pipe:[5]");
	findings__free(f);
	wait_list__clear(&w);

	/* preempted (runnable) time and waits inside CUDA/NCCL frames are not data waits */
	for (uint64_t t = 0; t + 20 * MS <= WIN; t += 20 * MS) {
		struct thread_wait in_nccl = { .pid = 1000, .tid = TID, .ts = T0 + t + 15 * MS,
					       .dur = 4 * MS, .kind = WAIT_OFFCPU, .name = "futex",
					       .state = 'S', .api_frame = "ncclAllReduce" };

		add_wait(&w, TID, T0 + t + 14 * MS + 500000, 5 * MS, WAIT_OFFCPU, "read", NULL, 'R');
		assert_int_equal(findings_add_waits(&w, &in_nccl, 1), 0);
	}
	f = run(&s, &w);
	assert_int_equal(f->n, 0);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

/* With --budget's pauses the waits are a share of the time recorded, and the finding says
 * so: waits in the first 300 ms only, where the collectors recorded, are a quarter of that
 * (a stall), though only 7.5% of the whole window */
static void test_waits_over_the_recorded_time(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;
	const struct finding *x;

	(void)state;
	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	for (uint64_t t = 0; t + 20 * MS <= 300 * MS; t += 20 * MS)
		add_wait(&w, TID, T0 + t + 14 * MS + 500000, 5 * MS, WAIT_SYSCALL, "read", "pipe:[5]", 0);
	f = run(&s, &w);
	assert_int_equal(count(f, "DataLoaderStall", SEV_WARNING), 0);
	findings__free(f);

	w.unrecorded = calloc(2, sizeof(*w.unrecorded));
	assert_non_null(w.unrecorded);
	w.unrecorded[0] = (struct an_span){ T0 + 300 * MS, T0 + 600 * MS };
	w.unrecorded[1] = (struct an_span){ T0 + 600 * MS, T0 + 1400 * MS };   /* past the window's end */
	w.nunrecorded = 2;
	f = run(&s, &w);
	assert_int_equal(count(f, "DataLoaderStall", SEV_WARNING), 1);
	x = &f->v[0];
	assert_true(ev(x, "share_of_window")->d > 0.24 && ev(x, "share_of_window")->d < 0.26);
	assert_true(ev(x, "recorded_s")->d == 0.3);
	assert_true(ev(x, "paused_by_budget_s")->d == 0.7);
	assert_non_null(strstr(x->summary, "(25.0% of the 0.3 s of the window recorded (--budget paused the "
					   "collectors for 0.7 s))"));
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

/*
 * A hang seen from the stacks only (no collective was hooked): a thread blocked for the
 * whole window, since before it, in gloo; a second process in no collective is named;
 * a library's idle worker loop and a wait that began in the window are not hangs.
 */
static void test_stuck_collective(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;
	const struct finding *x;
	struct thread_wait stuck = {
		.pid = 1000, .tid = 1000, .ts = T0, .dur = WIN, .kind = WAIT_OFFCPU,
		.name = "futex", .state = 'S', .open_at_end = true, .began_before = true,
		.blocked_ns = 90 * 1000 * MS, .collective = "c10d::Work::wait(std::chrono::duration<long>)",
		.py_frame = "all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1541)",
		.stack = "futex_do_wait_[k] <- c10d::Work::wait <- all_reduce (...)",
	};
	struct thread_wait worker = stuck, idle = stuck, recent = stuck, elsewhere = {
		.pid = 2000, .tid = 2000, .ts = T0 + 100 * MS, .dur = 900 * MS, .kind = WAIT_OFFCPU,
		.name = "clock_nanosleep", .state = 'S',
		.py_frame = "evaluate_forever (/work/gloo_hang.py:23)",
	};

	(void)state;
	worker.tid = 1003;
	worker.py_frame = NULL;
	worker.collective = "gloo::transport::tcp::UnboundBuffer::waitRecv(int*)";
	idle.tid = 1004;
	idle.py_frame = NULL;
	idle.collective = NULL;   /* c10d::ProcessGroupGloo::runLoop: not a collective frame */
	recent.tid = 1005;
	recent.began_before = false;
	assert_false(findings_is_collective_frame("c10d::ProcessGroupGloo::runLoop(int)"));
	assert_true(findings_is_collective_frame("ncclAllReduce"));
	assert_false(findings_is_collective_frame("all_reduce (/x/distributed_c10d.py:1)"));
	assert_false(findings_is_collective_frame("ncclKernel_[k]"));
	synth_init(&s, 1, T0, T0 + WIN);
	assert_int_equal(findings_add_waits(&w, &stuck, 1), 0);
	assert_int_equal(findings_add_waits(&w, &worker, 1), 0);
	assert_int_equal(findings_add_waits(&w, &idle, 1), 0);
	assert_int_equal(findings_add_waits(&w, &recent, 1), 0);
	assert_int_equal(findings_add_waits(&w, &elsewhere, 1), 0);
	w.offcpu_known = true;
	f = run(&s, &w);
	assert_int_equal(count(f, "NcclHang", SEV_CRITICAL), 1);
	x = &f->v[0];
	assert_int_equal(x->pid, 1000);
	assert_int_equal(x->tid, 1000);   /* the caller with Python frames leads */
	assert_true(ev(x, "blocked_s")->d > 89.9);
	assert_string_equal(ev(x, "python_frame")->s, stuck.py_frame);
	assert_non_null(strstr(ev(x, "other_threads")->s, "thread 1003: gloo::"));
	assert_null(strstr(ev(x, "other_threads")->s, "1004"));
	assert_null(strstr(ev(x, "other_threads")->s, "1005"));
	assert_non_null(strstr(ev(x, "not_in_collective")->s, "pid 2000: evaluate_forever"));
	assert_non_null(strstr(x->summary, "c10d::Work::wait from all_reduce (distributed_c10d.py:1541)"));
	assert_non_null(strstr(x->summary, "pid 2000 (evaluate_forever (gloo_hang.py:23))"));
	assert_true(strlen(x->summary) < sizeof(x->summary) - 1);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

/* Worker processes: the busiest, by time worked, is named with its frame; a worker seen
 * for a few ms as it exited is not. */
static void test_loader_workers(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;
	const struct finding *x;
	struct wait_proc procs[3] = {
		{ .pid = 2001, .parent = 1000, .started_ns = 0 },          /* exiting */
		{ .pid = 2002, .parent = 1000, .started_ns = T0 + 100 * MS },  /* fast */
		{ .pid = 2003, .parent = 1000, .started_ns = T0 + 100 * MS },  /* slow */
	};

	(void)state;
	synth_init(&s, 1, T0, T0 + WIN);
	/* the main thread waits for its batches most of the window */
	for (uint64_t t = 0; t + 50 * MS <= WIN; t += 50 * MS) {
		struct thread_wait m = { .pid = 1000, .tid = 1000, .ts = T0 + t, .dur = 45 * MS,
					 .kind = WAIT_OFFCPU, .name = "poll", .state = 'S' };
		struct thread_wait fast = { .pid = 2002, .tid = 2002, .ts = T0 + 100 * MS + t,
					    .dur = 35 * MS, .kind = WAIT_OFFCPU, .name = "read",
					    .state = 'S' };
		struct thread_wait slow = { .pid = 2003, .tid = 2003, .ts = T0 + 100 * MS + t,
					    .dur = 40 * MS, .kind = WAIT_OFFCPU,
					    .name = "clock_nanosleep", .state = 'S',
					    .py_frame = "slow_fetch (/w/torch_loader.py:30)" };

		assert_int_equal(findings_add_waits(&w, &m, 1), 0);
		if (T0 + 100 * MS + t + 50 * MS <= T0 + WIN) {
			assert_int_equal(findings_add_waits(&w, &fast, 1), 0);
			assert_int_equal(findings_add_waits(&w, &slow, 1), 0);
		}
	}
	{
		struct thread_wait gone = { .pid = 2001, .tid = 2001, .ts = T0, .dur = 20 * MS,
					    .kind = WAIT_OFFCPU, .name = "clock_nanosleep",
					    .state = 'S' };

		assert_int_equal(findings_add_waits(&w, &gone, 1), 0);
	}
	w.procs = malloc(sizeof(procs));
	assert_non_null(w.procs);
	memcpy(w.procs, procs, sizeof(procs));
	w.nprocs = 3;
	w.offcpu_known = true;
	f = run(&s, &w);
	assert_int_equal(count(f, "DataLoaderStall", SEV_CRITICAL), 1);
	x = &f->v[0];
	assert_int_equal(x->pid, 1000);
	assert_int_equal(ev(x, "slowest_worker")->u, 2003);
	assert_string_equal(ev(x, "slowest_worker_in")->s, "slow_fetch (/w/torch_loader.py:30)");
	/* 35 ms of every 50 waiting for its next index: busy 30%, less the last wait's tail */
	assert_true(strstr(ev(x, "workers")->s, "pid 2002: busy 29%") ||
		    strstr(ev(x, "workers")->s, "pid 2002: busy 30%"));
	assert_non_null(strstr(ev(x, "workers")->s, "pid 2003: busy 100%"));
	assert_true(ev(x, "share_of_window")->d > 0.85);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

static void test_no_waits(void **state)
{
	struct synth s;
	struct findings *f;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	f = run(&s, NULL);
	assert_false(f->waits_known);
	assert_string_equal(f->waits_why, "eBPF off in this test");
	assert_int_equal(f->n, 0);
	findings__free(f);
	synth_free_all(&s);
}

static void test_pageable_memcpy(void **state)
{
	struct synth s;
	struct findings *f;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	/* 50 x 8 MiB synchronous pageable copies of 3 ms: 15% */
	for (uint64_t t = 0; t + 20 * MS <= WIN; t += 20 * MS)
		synth_memcpy(&s.t[0], TID, T0 + t + 1 * MS, 3 * MS, AIPROF_MEMCPY_H2D, 8 << 20, false, false);
	f = run(&s, NULL);
	assert_int_equal(count(f, "PageableMemcpy", SEV_WARNING), 1);
	assert_int_equal(count_at_least(f, SEV_WARNING), 1);
	assert_int_equal(ev(&f->v[0], "copies")->u, 50);
	findings__free(f);
	synth_free_all(&s);
}

/* device-to-host pageable copies right before checkpoint writes belong to the checkpoint */
static void test_pageable_staging_excluded(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	for (uint64_t t = 0; t + 40 * MS <= WIN; t += 40 * MS) {
		synth_memcpy(&s.t[0], TID, T0 + t + 15 * MS, 3 * MS, AIPROF_MEMCPY_D2H, 8 << 20, false, false);
		add_wait(&w, TID, T0 + t + 18 * MS + 100000, 1 * MS, WAIT_SYSCALL, "write", "/ckpt/x", 0);
	}
	f = run(&s, &w);
	assert_int_equal(count(f, "PageableMemcpy", SEV_INFO), 0);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

static void test_small_kernels(void **state)
{
	struct synth s;
	struct findings *f;

	synth_init(&s, 1, T0, T0 + 100 * MS);
	synth_thread(&s.t[0], TID, "t");
	synth_string(&s.t[0], 1, "add");
	/* 2000 launches of 64 threads in 100 ms: 20000/s */
	for (uint64_t i = 0; i < 2000; i++)
		synth_launch(&s.t[0], TID, T0 + i * 50000, 3000, 1, 1, 64, 0);
	f = run(&s, NULL);
	assert_int_equal(count(f, "SmallKernels", SEV_CRITICAL), 1);
	assert_int_equal(count_at_least(f, SEV_WARNING), 1);
	assert_string_equal(ev(&f->v[0], "timing")->s, "api");
	findings__free(f);
	synth_free_all(&s);
}

static void test_excessive_sync(void **state)
{
	struct synth s;
	struct findings *f;

	synth_init(&s, 1, T0, T0 + WIN);
	synth_thread(&s.t[0], TID, "t");
	synth_string(&s.t[0], 1, "k");
	for (uint64_t t = 0; t + 5 * MS <= WIN; t += 5 * MS) {
		synth_launch(&s.t[0], TID, T0 + t, 5000, 1, 65536, 256, 0);
		synth_sync(&s.t[0], TID, T0 + t + 10000, 2 * MS, true);
	}
	f = run(&s, NULL);
	assert_int_equal(count(f, "ExcessiveSync", SEV_WARNING), 1);
	assert_int_equal(count_at_least(f, SEV_WARNING), 1);
	assert_int_equal(ev(&f->v[0], "device_syncs")->u, 200);
	findings__free(f);
	synth_free_all(&s);
}

static void test_memory_growth(void **state)
{
	struct synth s;
	struct findings *f;

	synth_init(&s, 1, T0, T0 + WIN);
	training(&s, TID);
	for (uint64_t i = 0; i < 20; i++)
		synth_mem(&s.t[0], TID, T0 + i * 50 * MS, true, 0x10000000 * (i + 1), 16 << 20);
	/* a one-off big buffer, allocated and freed, is not growth */
	synth_mem(&s.t[0], TID, T0 + 1 * MS, true, 0x1, 1ULL << 30);
	synth_mem(&s.t[0], TID, T0 + 2 * MS, false, 0x1, 0);
	f = run(&s, NULL);
	assert_int_equal(count(f, "GpuMemoryGrowth", SEV_WARNING), 1);
	assert_int_equal(count_at_least(f, SEV_WARNING), 1);
	assert_int_equal(ev(&f->v[0], "unfreed_bytes")->u, 20ULL * (16 << 20));
	assert_int_equal(ev(&f->v[0], "unfreed_allocations")->u, 20);
	findings__free(f);
	synth_free_all(&s);
}

/* two ranks, rank 1 enters every collective 15 ms late */
static void stragglers(struct synth *s, struct wait_list *w, bool explained)
{
	synth_init(s, 1, T0, T0 + WIN);
	synth_thread(&s->t[0], 11, "r0");
	synth_thread(&s->t[0], 12, "r1");
	for (uint64_t t = 0; t + 40 * MS <= WIN; t += 40 * MS) {
		synth_coll(&s->t[0], 11, T0 + t + 1 * MS, 16 * MS, 0, 2, 1 << 20);
		synth_coll(&s->t[0], 12, T0 + t + 16 * MS, 1 * MS, 1, 2, 1 << 20);
		if (explained)
			add_wait(w, 12, T0 + t + 1 * MS, 15 * MS, WAIT_SYSCALL, "read", "pipe:[9]", 0);
	}
}

static void test_straggler(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;
	const struct finding *x;

	stragglers(&s, &w, false);
	f = run(&s, &w);
	assert_int_equal(count(f, "Straggler", SEV_WARNING), 1);
	assert_int_equal(count_at_least(f, SEV_WARNING), 1);
	x = &f->v[0];
	assert_int_equal(x->rank, 1);
	assert_int_equal(x->tid, 12);
	assert_true(ev(x, "median_lateness_ms")->d > 14.9 && ev(x, "median_lateness_ms")->d < 15.1);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);

	/* the same lateness spent waiting for data: DataLoaderStall's, not a straggler */
	stragglers(&s, &w, true);
	f = run(&s, &w);
	assert_int_equal(count(f, "Straggler", SEV_INFO), 0);
	assert_int_equal(count(f, "DataLoaderStall", SEV_WARNING), 1);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

/* both ranks go silent 600 ms into a 2 s window and stay blocked */
static void test_nccl_hang(void **state)
{
	struct synth s;
	struct wait_list w = { 0 };
	struct findings *f;
	const struct finding *x;

	synth_init(&s, 1, T0, T0 + 2000 * MS);
	for (uint32_t r = 0; r < 2; r++) {
		synth_thread(&s.t[0], 11 + r, "rank");
		for (uint64_t t = 0; t + 40 * MS <= 600 * MS; t += 40 * MS) {
			synth_memcpy(&s.t[0], 11 + r, T0 + t, 1 * MS, AIPROF_MEMCPY_D2D, 4096, true, true);
			synth_coll(&s.t[0], 11 + r, T0 + t + 2 * MS, 3 * MS, (int)r, 2, 1 << 20);
		}
		synth_memcpy(&s.t[0], 11 + r, T0 + 600 * MS, 1 * MS, AIPROF_MEMCPY_D2D, 4096, true, true);
		add_wait(&w, 11 + r, T0 + 602 * MS, 1398 * MS, WAIT_OFFCPU, r ? "pause" : "futex", NULL, 'S');
		w.v[w.n - 1].open_at_end = true;
	}
	w.offcpu_known = true;
	f = run(&s, &w);
	assert_int_equal(count(f, "NcclHang", SEV_CRITICAL), 1);
	assert_int_equal(count_at_least(f, SEV_WARNING), 1);
	x = &f->v[0];
	assert_string_equal(ev(x, "expected_call")->s, "ncclAllReduce");
	assert_string_equal(ev(x, "silent_ranks")->s, "0,1");
	assert_true(ev(x, "outstanding_s")->d > 1.39);
	assert_non_null(strstr(ev(x, "blocked_in")->s, "pause"));
	findings__free(f);

	/* without off-CPU data it is only a suspicion */
	f = run(&s, NULL);
	assert_int_equal(count(f, "NcclHang", SEV_WARNING), 1);
	assert_int_equal(count(f, "NcclHang", SEV_CRITICAL), 0);
	findings__free(f);
	wait_list__clear(&w);
	synth_free_all(&s);
}

static void test_thresholds_table(void **state)
{
	size_t n = 0;
	const struct finding_threshold_row *t = findings_thresholds(&n);

	assert_true(n >= 20);
	for (size_t i = 0; i < n; i++) {
		bool known = false;

		assert_non_null(t[i].name);
		assert_non_null(t[i].why);
		assert_true(t[i].value > 0);
		for (size_t c = 0; c < FINDING_CATEGORIES; c++)
			known |= strcmp(t[i].category, finding_categories[c]) == 0;
		assert_true(known);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clean_window),
		cmocka_unit_test(test_wait_classes),
		cmocka_unit_test(test_sync_checkpoint),
		cmocka_unit_test(test_sync_checkpoint_top_wait_from_records),
		cmocka_unit_test(test_sync_checkpoint_negatives),
		cmocka_unit_test(test_dataloader_stall),
		cmocka_unit_test(test_waits_over_the_recorded_time),
		cmocka_unit_test(test_no_waits),
		cmocka_unit_test(test_pageable_memcpy),
		cmocka_unit_test(test_pageable_staging_excluded),
		cmocka_unit_test(test_small_kernels),
		cmocka_unit_test(test_excessive_sync),
		cmocka_unit_test(test_memory_growth),
		cmocka_unit_test(test_straggler),
		cmocka_unit_test(test_nccl_hang),
		cmocka_unit_test(test_stuck_collective),
		cmocka_unit_test(test_loader_workers),
		cmocka_unit_test(test_thresholds_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
