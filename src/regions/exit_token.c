/*
 * exit_token.c — robust mutexes as tokens of a thread's life (see
 * exit_token.h for why and for the memory order).
 */
#include "regions/exit_token.h"

#include <errno.h>

void _brisk_exit_token_init(brisk_exit_token_t *token) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&token->mutex, &attr);
  pthread_mutexattr_destroy(&attr);
}

void _brisk_exit_token_fini(brisk_exit_token_t *token) { pthread_mutex_destroy(&token->mutex); }

/* How many times _brisk_exit_token_hold tries: a probe holds a token
 * between two calls (_brisk_exit_token_holder_died), so a thread that
 * meets one waits out a probe that is not preempted there; a token held
 * for good (a forked parent's) costs that many failed tries, once per
 * resource taken. */
#define HOLD_TRIES 1024

bool _brisk_exit_token_hold(brisk_exit_token_t *token) {
  int error = pthread_mutex_trylock(&token->mutex);
  for (int tries = 1; error == EBUSY && tries < HOLD_TRIES; tries++) {
    brisk_cpu_relax();
    error = pthread_mutex_trylock(&token->mutex);
  }
  /* Its last holder died holding it and nobody has probed it since: what it
   * guarded is already the caller's (it took that first), so only the
   * mutex needs making usable again. */
  if (error == EOWNERDEAD) error = pthread_mutex_consistent(&token->mutex);
  return error == 0;
}

/* EPERM in a forked child for a token held at fork (exit_token.h): nothing
 * to undo. */
void _brisk_exit_token_drop(brisk_exit_token_t *token) { (void)pthread_mutex_unlock(&token->mutex); }

bool _brisk_exit_token_holder_died(brisk_exit_token_t *token) {
  int error = pthread_mutex_trylock(&token->mutex);
  if (error == EBUSY) return false; /* a live holder (or a forked parent's) */
  bool died = error == EOWNERDEAD;
  if (died) pthread_mutex_consistent(&token->mutex);
  /* Unheld again either way: nobody held it (its holder has not taken it
   * yet, or went without: _brisk_exit_token_hold), or it was the dead
   * holder's, now the caller's to give up. */
  if (died || error == 0) pthread_mutex_unlock(&token->mutex);
  return died;
}
