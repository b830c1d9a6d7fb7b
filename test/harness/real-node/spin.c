/*
 * spin: the behaviours the task-image tests need, in images that may have no shell and no other
 * program (test/harness/task-images.ts builds it three ways: glibc, musl dynamic, musl static).
 *
 *   spin hello              one line naming its libc and uid, exit 0
 *   spin shell PID          the executable of PID (which shell ran the task's script)
 *   spin stamp              "stamp <epoch ms>", exit 0 (the benchmark's first line)
 *   spin order N            N lines on stdout and N on stderr, alternating, each one write
 *   spin tree MARK loud|quiet
 *                           a grandchild that holds both output pipes, a process that starts a new
 *                           session and clears its environment, and the leader; all ignore SIGTERM
 *                           and never end. loud: a line every 200 ms; quiet: one line, then silence
 *   spin hold MARK ...      ignore SIGTERM, sleep forever (what tree starts)
 *   spin cooperate          ignore SIGTERM; exit 0 once $PLAYBOOK_CANCEL_FILE exists, saying so
 *   spin hog MB             touch MB MiB of memory, then sleep
 *   spin procs N MARK       N processes in the leader's group (N-1 children), "procs ready <epoch ms>"
 *   spin cat FILE           FILE on stdout
 *   spin watch PID...       (on the host, for the benchmark) waits until every PID is gone or a
 *                           zombie, polling every 200 us; prints "dead <epoch ms>"
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef SPIN_KIND
#ifdef __GLIBC__
#define SPIN_KIND "glibc"
#else
#define SPIN_KIND "musl"
#endif
#endif

static void say(int fd, const char *format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) n = sizeof line - 1;
  for (int off = 0; off < n;) {
    ssize_t w = write(fd, line + off, n - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += w;
  }
}

static long long started_ms;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void forever(void) {
  for (;;) pause();
}

static const char *self_path(void) {
  static char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n < 0) return "/usr/bin/spin";
  buf[n] = 0;
  return buf;
}

static int hold(char **argv) {
  (void)argv;
  signal(SIGTERM, SIG_IGN);
  forever();
  return 0;
}

static int tree(const char *mark, int loud) {
  signal(SIGTERM, SIG_IGN);
  const char *self = self_path();
  pid_t a = fork();
  if (a == 0) {
    /* The grandchild keeps stdout and stderr open; its parent exits at once, so the grandchild is
     * an orphan (the agent, a subreaper, inherits it). */
    if (fork() == 0) {
      char *args[] = {"spin", "hold", (char *)mark, "grandchild", NULL};
      execv(self, args);
      _exit(127);
    }
    _exit(0);
  }
  if (fork() == 0) {
    /* A new session, its own process group, no environment, no output pipe. */
    setsid();
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
    }
    char *args[] = {"spin", "hold", (char *)mark, "escaped", NULL};
    char *env[] = {NULL};
    execve(self, args, env);
    _exit(127);
  }
  say(1, "tree up (%s)\n", SPIN_KIND);
  if (!loud) forever();
  for (long i = 1;; i++) {
    say(1, "tick %ld\n", i);
    nap_ms(200);
  }
}

static int cooperate(void) {
  signal(SIGTERM, SIG_IGN);
  const char *file = getenv("PLAYBOOK_CANCEL_FILE");
  if (!file || !*file) {
    say(2, "PLAYBOOK_CANCEL_FILE is not set\n");
    return 2;
  }
  say(1, "waiting for %s\n", file);
  for (;;) {
    if (access(file, F_OK) == 0) {
      say(1, "cancel file seen: %s\n", file);
      return 0;
    }
    nap_ms(20);
  }
}

static int hog(long mb) {
  say(1, "hog %ld MiB\n", mb);
  for (long i = 0; i < mb; i++) {
    char *chunk = malloc(1 << 20);
    if (!chunk) return 3;
    memset(chunk, 'a' + (int)(i % 26), 1 << 20);
  }
  say(1, "hog done\n");
  forever();
  return 0;
}

static int procs(long n, const char *mark) {
  const char *self = self_path();
  for (long i = 1; i < n; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      char *args[] = {"spin", "hold", (char *)mark, "member", NULL};
      execv(self, args);
      _exit(127);
    }
    if (pid < 0) {
      say(2, "fork: %s\n", strerror(errno));
      return 1;
    }
  }
  say(1, "procs ready %lld\n", started_ms);
  forever();
  return 0;
}

static int cat(const char *file) {
  int fd = open(file, O_RDONLY);
  if (fd < 0) {
    say(2, "%s: %s\n", file, strerror(errno));
    return 1;
  }
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    if (write(1, buf, n) != n) return 1;
  return n < 0 ? 1 : 0;
}

static int dead(const char *pid) {
  char file[64], stat[512];
  snprintf(file, sizeof file, "/proc/%s/stat", pid);
  int fd = open(file, O_RDONLY);
  if (fd < 0) return 1;
  ssize_t n = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (n <= 0) return 1;
  stat[n] = 0;
  char *end = strrchr(stat, ')');
  return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

static int watch(int count, char **pids) {
  for (;;) {
    int alive = 0;
    for (int i = 0; i < count && !alive; i++) alive = !dead(pids[i]);
    if (!alive) break;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  say(1, "dead %lld\n", now_ms());
  return 0;
}

int main(int argc, char **argv) {
  started_ms = now_ms();
  const char *what = argc > 1 ? argv[1] : "hello";
  if (!strcmp(what, "hello")) {
    say(1, "spin %s uid %d\n", SPIN_KIND, (int)getuid());
    return 0;
  }
  if (!strcmp(what, "shell") && argc > 2) {
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/%s/exe", argv[2]);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) return 1;
    target[n] = 0;
    say(1, "shell %s\n", target);
    return 0;
  }
  if (!strcmp(what, "stamp")) {
    say(1, "stamp %lld\n", now_ms());
    return 0;
  }
  if (!strcmp(what, "order") && argc > 2) {
    long n = atol(argv[2]);
    for (long i = 1; i <= n; i++) {
      say(1, "out %ld\n", i);
      say(2, "err %ld\n", i);
    }
    return 0;
  }
  if (!strcmp(what, "tree") && argc > 3) return tree(argv[2], !strcmp(argv[3], "loud"));
  if (!strcmp(what, "hold")) return hold(argv);
  if (!strcmp(what, "cooperate")) return cooperate();
  if (!strcmp(what, "hog") && argc > 2) return hog(atol(argv[2]));
  if (!strcmp(what, "procs") && argc > 3) return procs(atol(argv[2]), argv[3]);
  if (!strcmp(what, "cat") && argc > 2) return cat(argv[2]);
  if (!strcmp(what, "watch")) return watch(argc - 2, argv + 2);
  say(2, "spin: unknown or incomplete command %s\n", what);
  return 2;
}
