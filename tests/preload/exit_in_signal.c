/*
 * exit_in_signal: a signal handler calls exit() while the program's only
 * thread is inside malloc or free, perhaps holding its heap's memory lock
 * (a page taken or given back on every round: 64 blocks of 60000 B, one per
 * medium page). Not async-signal-safe, but common; with BRISK_STATS=1 the
 * report at exit must still finish instead of waiting forever for a lock
 * whose holder will never run again. exit_in_signal.py runs it many times.
 * Not linked to brisk.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>

static void on_alarm(int signal_number) {
  (void)signal_number;
  exit(0);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  struct itimerval after = {{0, 0}, {0, 20000}}; /* 20 ms */
  setitimer(ITIMER_REAL, &after, NULL);
  void *blocks[64];
  for (;;) {
    for (int i = 0; i < 64; i++) blocks[i] = malloc(60000);
    for (int i = 0; i < 64; i++) free(blocks[i]);
  }
}
