/* The pod sandbox's PID 1 for the dev cluster's real node, as Kubernetes' pause image does it:
 * sleeps until SIGINT or SIGTERM (then exits 0) and reaps every child it inherits. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal) {
  (void)signal;
  _exit(0);
}

static void reap(int signal) {
  (void)signal;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stopping = {.sa_handler = stop};
  struct sigaction reaping = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stopping, NULL) < 0 || sigaction(SIGTERM, &stopping, NULL) < 0 ||
      sigaction(SIGCHLD, &reaping, NULL) < 0)
    return 1;
  for (;;) pause();
}
