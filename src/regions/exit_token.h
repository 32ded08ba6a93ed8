/*
 * exit_token.h — how another thread learns that a thread died without its
 * pthread key destructors having cleaned up after it.
 *
 * Why. A thread's per-thread region state (its thread slot, its default
 * stack) is given back by a pthread key destructor. glibc (2.36,
 * nptl/nptl_deallocate_tsd.c) runs key destructors in rounds, each over
 * the keys in index order (the order they were created in, but where a
 * deleted key's index was reused), and stops after
 * PTHREAD_DESTRUCTOR_ITERATIONS (4) rounds: a value set during the last
 * round for a key it has already passed in that round is dropped without
 * its destructor. So when another key's destructor, in the last round,
 * makes a thread's first region call (or its first call after brisk's
 * destructor gave its state back), the state it takes would never be
 * given back. The thread cannot decline it: nothing tells a thread that it
 * is exiting, let alone in which round (glibc has no such call; its C++
 * thread_local destructors, __call_tls_dtors, run before the first round,
 * not after the last; brisk's own flags, such as the general allocator's
 * _brisk_thread_exited, are set only by a brisk destructor that ran for
 * this thread, which a thread that never called brisk before has not).
 *
 * What does reach every thread after its last destructor is the kernel:
 * when a thread exits it walks the thread's robust-futex list (registered
 * by glibc for every thread) and marks each robust mutex the thread still
 * holds with FUTEX_OWNER_DIED, so the next pthread_mutex_trylock on it
 * returns EOWNERDEAD. An exit token is such a mutex: the thread that takes
 * a per-thread resource holds the resource's token too; its key
 * destructor, when it runs, drops the token and gives the resource back;
 * when it never runs, the token tells any later thread that probes it that
 * the holder died holding the resource, which that thread then takes back
 * (thread_slot.c when every slot is held, stack.c's sweep of default
 * stacks).
 *
 * Cost: a trylock when the resource is taken and an unlock when it is given
 * back, neither ever waits, so no system call (the mutex has no waiters);
 * probes only on the slow paths that look for dead holders. Nothing here is
 * on a fast path.
 *
 * Memory order: the kernel marks the word with an atomic read-modify-write
 * in the exiting thread itself, after everything that thread did, and
 * pthread_mutex_trylock reads it with acquire: what the dead holder wrote
 * happens before what the prober does with the resource. An unlock is a
 * release, a trylock that succeeds an acquire, as for any mutex.
 *
 * Rules. A token must not be held when its memory is released or reused (a
 * held robust mutex is linked into its holder's robust list, which glibc
 * and the kernel walk): drop, then fini, then let the memory go.
 *
 * fork: the child's thread does not inherit the robust list (glibc empties
 * it), so every token held at fork stays locked in the child for good,
 * by a thread id nobody there has: probes see a live holder, so the
 * resources of the parent's other threads are never taken back (their
 * state may have been halfway through a change), and the forking thread's
 * own drop fails with EPERM, which is harmless.
 */
#ifndef BRISK_REGIONS_EXIT_TOKEN_H
#define BRISK_REGIONS_EXIT_TOKEN_H

#include <pthread.h>

#include "base/base.h"

typedef struct brisk_exit_token_s {
  pthread_mutex_t mutex; /* robust, process-private, never waited for */
} brisk_exit_token_t;

/* Made unheld (pthread_mutex_init of a robust mutex cannot fail on Linux). */
BRISK_HIDDEN void _brisk_exit_token_init(brisk_exit_token_t *token);
/* Before its memory goes (unheld). */
BRISK_HIDDEN void _brisk_exit_token_fini(brisk_exit_token_t *token);
/* The calling thread holds it from now on: true; false when another thread
 * holds it and keeps it through a thousand tries (a probe preempted while
 * it holds it; in a forked child, a thread of the parent), and the caller
 * goes without one. */
BRISK_HIDDEN bool _brisk_exit_token_hold(brisk_exit_token_t *token);
/* The holder gives it up (at its thread's exit, by a key destructor). */
BRISK_HIDDEN void _brisk_exit_token_drop(brisk_exit_token_t *token);
/* Another thread: true when the thread that held it died holding it (the
 * token is then unheld again, and what it guarded is the caller's); false
 * when a live thread holds it, or nobody does. */
BRISK_HIDDEN bool _brisk_exit_token_holder_died(brisk_exit_token_t *token);

#endif /* BRISK_REGIONS_EXIT_TOKEN_H */
