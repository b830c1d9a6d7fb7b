/*
 * playbook agent: starts tasks in a task container for the runner, streams their output, reports
 * their pids and exits, and signals what the runner tells it to. It makes no decision: deadlines,
 * stall, grace and the end-of-run sweep are the runner's. See docs/agent.md for the protocol.
 *
 * Usage: agent SOCKET CONTAINER
 *        agent --install DIR   (places this binary and the busybox beside it in DIR: a pod's postStart)
 *
 * Built static with musl (tools/build-agent.sh), so it needs nothing from the task's image.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_CHILD_SUBREAPER
#define PR_SET_CHILD_SUBREAPER 36
#endif

#define MAX_PAYLOAD (1u << 20)
/* The runner takes at most this much before a hello: the hello is cut to fit (environment last). */
#define MAX_HELLO_PAYLOAD (64u << 10)
/* The connection's key, hex, sent before the hello: the runner reads nothing else first. */
#define KEY_LENGTH 64
/* Output queued for the runner beyond this and the task pipes are not read: a runner that is
 * behind holds its tasks at their pipes, while its frames (kills, fences) are still read. */
#define OUT_HIGH (256u << 10)
/* Room for one more output frame and the control frames (P, X, C, F, R) that follow it. */
#define OUT_CAP (OUT_HIGH + 5 + 4 + CHUNK + (64u << 10))
#define MAX_TASKS 64
#define CHUNK 65536
#define CONNECT_WAIT_MS 60000
/* The runner may listen only after its agents started (Node starts slower than the agent): each
 * retry's wait delays the first task, and a connect() that fails costs microseconds. */
#define CONNECT_RETRY_MS 5
#define SWEEP_MS 2000

struct task {
	int used;
	uint32_t id;
	pid_t pid;
	int out, err;   /* read ends, -1 once closed */
	int exited;     /* leader reaped and X sent */
};

static struct task tasks[MAX_TASKS];
static int sock = -1;
/* The signalfd, which a task's child closes before it is dumpable again. */
static int sfd_global = -1;
static pid_t self;
static char shell[4096];
static int shell_is_busybox;

static const struct { int n; const char *name; } signals[] = {
	{SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
	{SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"},
	{SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
	{SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
	{SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
	{SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
	{SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
	{SIGPWR, "SIGPWR"}, {SIGSYS, "SIGSYS"},
};

static const char *signal_name(int n, char *buf, size_t size)
{
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (signals[i].n == n) return signals[i].name;
	snprintf(buf, size, "SIG%d", n);
	return buf;
}

static int signal_number(const char *s)
{
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (strcmp(signals[i].name, s) == 0 || strcmp(signals[i].name + 3, s) == 0) return signals[i].n;
	char *end;
	long n = strtol(s, &end, 10);
	if (*s && !*end && n > 0 && n < 65) return (int)n;
	return -1;
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/* ---- output to the runner ---- */

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR) continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void kill_descendants_and_exit(int code);

/* Frames to the runner go through one queue, written as the socket takes them (it is non-blocking
 * once the hello is out), so the agent never blocks in a write while the runner is not reading:
 * it goes on reading the runner's frames and stops reading the task pipes instead. */
static unsigned char outq[OUT_CAP];
static size_t outlen;
static int exiting;

/* Writes what the socket takes now; -1 when the connection is gone. */
static int flush_some(void)
{
	while (outlen > 0) {
		ssize_t n = write(sock, outq, outlen);
		if (n < 0) {
			if (errno == EINTR) continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
			return -1;
		}
		memmove(outq, outq + n, outlen - (size_t)n);
		outlen -= (size_t)n;
	}
	return 0;
}

/* Waits (at most `ms`, or for ever when ms < 0) until the queue holds no more than `left` bytes. */
static int flush_until(size_t left, int ms)
{
	long long until = now_ms() + ms;
	for (;;) {
		if (flush_some() < 0) return -1;
		if (outlen <= left) return 0;
		int wait = ms < 0 ? -1 : (int)(until - now_ms());
		if (ms >= 0 && wait <= 0) return -1;
		struct pollfd p = {sock, POLLOUT, 0};
		if (poll(&p, 1, wait) < 0 && errno != EINTR) return -1;
	}
}

static void send_frame(char type, const void *payload, size_t len)
{
	unsigned char head[5] = {(unsigned char)type, (unsigned char)(len >> 24), (unsigned char)(len >> 16),
	                         (unsigned char)(len >> 8), (unsigned char)len};
	if (exiting) return;
	if (5 + len > OUT_CAP) kill_descendants_and_exit(1);
	/* No room: a control frame while the runner is behind by more than the slack. Wait for it. */
	if (outlen + 5 + len > OUT_CAP && flush_until(OUT_CAP - 5 - len, -1) < 0) kill_descendants_and_exit(0);
	memcpy(outq + outlen, head, 5);
	memcpy(outq + outlen + 5, payload, len);
	outlen += 5 + len;
	if (flush_some() < 0) kill_descendants_and_exit(0);
}

/* A frame of NUL-separated text fields. */
static void send_fields(char type, int count, ...)
{
	static char buf[8192];
	size_t len = 0;
	va_list ap;
	va_start(ap, count);
	for (int i = 0; i < count; i++) {
		const char *f = va_arg(ap, const char *);
		size_t n = strlen(f);
		if (i > 0 && len < sizeof buf) buf[len++] = '\0';
		if (n > sizeof buf - len) n = sizeof buf - len;
		memcpy(buf + len, f, n);
		len += n;
	}
	va_end(ap);
	send_frame(type, buf, len);
}

extern char **environ;

/* Hello: container, pid, uid, shell, then this container's environment (the image's ENV and what
 * the kubelet set): tasks start from it, not from the runner's, so an image's PATH holds. */
static void send_hello(const char *container, const char *pid, const char *uid, const char *sh)
{
	char *buf = malloc(MAX_HELLO_PAYLOAD);
	if (!buf) kill_descendants_and_exit(1);
	size_t len = 0;
	const char *head[4] = {container, pid, uid, sh};
	for (int i = 0; i < 4; i++) {
		size_t n = strlen(head[i]);
		if (i > 0) buf[len++] = '\0';
		memcpy(buf + len, head[i], n);
		len += n;
	}
	for (char **e = environ; e && *e; e++) {
		size_t n = strlen(*e);
		if (!strchr(*e, '=') || **e == '=' || len + 1 + n > MAX_HELLO_PAYLOAD) continue;
		buf[len++] = '\0';
		memcpy(buf + len, *e, n);
		len += n;
	}
	send_frame('H', buf, len);
	free(buf);
}

static void send_error(const char *id, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	send_fields('R', 2, id, text);
}

/* ---- /proc ---- */

struct proc { pid_t pid, ppid; char state; };

static int by_pid(const void *a, const void *b)
{
	pid_t x = ((const struct proc *)a)->pid, y = ((const struct proc *)b)->pid;
	return (x > y) - (x < y);
}

/* Every process /proc shows, with its parent and state, sorted by pid. Returns the count; *out is
 * malloc'd. */
static size_t read_procs(struct proc **out)
{
	size_t cap = 256, n = 0;
	struct proc *list = malloc(cap * sizeof *list);
	DIR *d = opendir("/proc");
	if (!d || !list) {
		if (d) closedir(d);
		free(list);
		*out = NULL;
		return 0;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0) continue;
		char path[64], line[512];
		snprintf(path, sizeof path, "/proc/%ld/stat", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) continue;
		ssize_t r = read(fd, line, sizeof line - 1);
		close(fd);
		if (r <= 0) continue;
		line[r] = '\0';
		char *paren = strrchr(line, ')');
		if (!paren || paren[1] != ' ') continue;
		char state;
		long ppid;
		if (sscanf(paren + 2, "%c %ld", &state, &ppid) != 2) continue;
		if (n == cap) {
			struct proc *grown = realloc(list, (cap *= 2) * sizeof *list);
			if (!grown) break;
			list = grown;
		}
		list[n++] = (struct proc){(pid_t)pid, (pid_t)ppid, state};
	}
	closedir(d);
	qsort(list, n, sizeof *list, by_pid);
	*out = list;
	return n;
}

/* list must be sorted by pid (read_procs sorts it). */
static int is_descendant(const struct proc *list, size_t n, pid_t pid)
{
	/* Walks up the parent chain; bounded by n steps, so a stale loop cannot hang. */
	for (size_t steps = 0; steps <= n && pid > 1; steps++) {
		struct proc key = {.pid = pid};
		const struct proc *found = bsearch(&key, list, n, sizeof *list, by_pid);
		if (!found) return 0;
		if (found->ppid == self) return 1;
		pid = found->ppid;
	}
	return 0;
}

/* ---- tasks ---- */

static struct task *task_by_id(uint32_t id)
{
	for (int i = 0; i < MAX_TASKS; i++)
		if (tasks[i].used && tasks[i].id == id) return &tasks[i];
	return NULL;
}

static void release_if_done(struct task *t)
{
	if (t->exited && t->out < 0 && t->err < 0) t->used = 0;
}

static void reap(void)
{
	int status;
	pid_t pid;
	struct rusage ru;
	/* wait4: the leader's rusage, which holds what it reaped (a shell's commands) as wait4 gives
	 * it to any parent: CPU time user + system, and the largest process's peak RSS. */
	while ((pid = wait4(-1, &status, WNOHANG, &ru)) > 0) {
		for (int i = 0; i < MAX_TASKS; i++) {
			struct task *t = &tasks[i];
			if (!t->used || t->exited || t->pid != pid) continue;
			char id[16], code[16] = "", sigbuf[16], cpu[32], mem[32];
			const char *sig = "";
			snprintf(id, sizeof id, "%u", t->id);
			if (WIFEXITED(status)) snprintf(code, sizeof code, "%d", WEXITSTATUS(status));
			else if (WIFSIGNALED(status)) sig = signal_name(WTERMSIG(status), sigbuf, sizeof sigbuf);
			long long usec = ((long long)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL +
			                 ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
			snprintf(cpu, sizeof cpu, "%lld", usec < 0 ? 0 : usec);
			snprintf(mem, sizeof mem, "%ld", ru.ru_maxrss < 0 ? 0 : ru.ru_maxrss);
			t->exited = 1;
			send_fields('X', 5, id, code, sig, cpu, mem);
			release_if_done(t);
		}
	}
}

/*
 * Sends sig to every descendant (the subreaper keeps orphans and setsid escapees among them). With
 * SIGKILL it repeats until none is left or SWEEP_MS pass, so a fork racing the sweep is caught.
 */
static void kill_tree(int sig)
{
	long long until = now_ms() + SWEEP_MS;
	for (;;) {
		struct proc *list;
		size_t n = read_procs(&list);
		int found = 0;
		for (size_t i = 0; i < n; i++) {
			if (list[i].state == 'Z' || list[i].pid == self) continue;
			if (!is_descendant(list, n, list[i].pid)) continue;
			if (kill(list[i].pid, sig) == 0) found++;
		}
		free(list);
		reap();
		if (sig != SIGKILL || found == 0 || now_ms() > until) return;
		pause_ms(5);
	}
}

static void kill_descendants_and_exit(int code)
{
	kill_tree(SIGKILL);
	/* What is queued (the last output, an answer) goes out if the runner still reads, briefly. */
	if (!exiting && sock >= 0) {
		exiting = 1;
		flush_until(0, 1000);
	}
	_exit(code);
}

static int is_spared(pid_t pid, const pid_t *spare, size_t nspare)
{
	for (size_t i = 0; i < nspare; i++)
		if (spare[i] == pid) return 1;
	return 0;
}

/*
 * The end-of-run fence: SIGKILL every process this agent may signal except the spared ones. As
 * root (never in a pod, which runs as a non-root user) that would be every process on a host, so
 * there the fence keeps to the agent's descendants.
 */
static void fence(const pid_t *spare, size_t nspare)
{
	int root = geteuid() == 0;
	long long until = now_ms() + SWEEP_MS;
	int alive = 0;
	for (;;) {
		struct proc *list;
		size_t n = read_procs(&list);
		int found = 0;
		for (size_t i = 0; i < n; i++) {
			pid_t pid = list[i].pid;
			/* PID 1 is not spared: a pod's sandbox (pause) runs as a user of its own, which the
			 * kill below may not signal (EPERM, not counted). A PID 1 this agent may signal is
			 * not the sandbox (a task's process, or one a task made): SIGKILL from inside its
			 * namespace does not end an init, so it stays counted and the fence says it is left. */
			if (list[i].state == 'Z' || pid == self || is_spared(pid, spare, nspare)) continue;
			if (root && !is_descendant(list, n, pid)) continue;
			if (kill(pid, SIGKILL) == 0) found++;
		}
		free(list);
		reap();
		if (found == 0) { alive = 0; break; }
		if (now_ms() > until) { alive = found; break; }
		pause_ms(5);
	}
	char text[16];
	snprintf(text, sizeof text, "%d", alive);
	send_fields('F', 1, text);
}

/* Where a bare shell name is looked for when the task's environment has no PATH: musl's execvp's. */
#define DEFAULT_PATH "/usr/local/bin:/bin:/usr/bin"
#define MAX_SHELL_WORDS 8

/*
 * The child's exec of the task's own shell (the start frame's SHELL: words separated by spaces),
 * as `WORDS... -c RUN`: a word with a slash is the path; a bare name is looked for on the task's
 * PATH as execvp does. Returns only on failure, with why in msg.
 */
static void exec_shell_words(char *words, char *run, char **env, char *msg, size_t size)
{
	char *argv[MAX_SHELL_WORDS + 3];
	int argc = 0;
	for (char *w = strtok(words, " "); w && argc < MAX_SHELL_WORDS; w = strtok(NULL, " ")) argv[argc++] = w;
	if (argc == 0) { snprintf(msg, size, "exec: the shell names no program"); return; }
	argv[argc] = "-c";
	argv[argc + 1] = run;
	argv[argc + 2] = NULL;
	if (strchr(argv[0], '/')) {
		execve(argv[0], argv, env);
		snprintf(msg, size, "exec %.900s: %s", argv[0], strerror(errno));
		return;
	}
	const char *path = NULL;
	for (char **e = env; *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
	if (!path) path = DEFAULT_PATH;
	int denied = 0;
	char candidate[4096];
	for (const char *dir = path;; ) {
		const char *colon = strchr(dir, ':');
		size_t n = colon ? (size_t)(colon - dir) : strlen(dir);
		snprintf(candidate, sizeof candidate, "%.*s%s%s", (int)n, n ? dir : ".", "/", argv[0]);
		execve(candidate, argv, env);
		if (errno == EACCES) denied = 1;
		else if (errno != ENOENT && errno != ENOTDIR) {
			snprintf(msg, size, "exec %.900s: %s", candidate, strerror(errno));
			return;
		}
		if (!colon) break;
		dir = colon + 1;
	}
	snprintf(msg, size, "%.256s %s on PATH %.700s", argv[0], denied ? "is not executable" : "not found", path);
}

static void start(char *payload, size_t len)
{
	/* Fields: ID, CWD, RUN, SHELL (empty: the default), then K=V entries. payload[len] is a NUL the
	 * reader added. */
	char *fields[4];
	size_t pos = 0;
	for (int i = 0; i < 4; i++) {
		if (pos > len) { send_error("", "start frame with fewer than 4 fields"); return; }
		fields[i] = payload + pos;
		pos += strlen(payload + pos) + 1;
	}
	size_t nenv = 0;
	for (size_t p = pos; p < len; p += strlen(payload + p) + 1) nenv++;
	char **env = calloc(nenv + 1, sizeof *env);
	if (!env) { send_error(fields[0], "out of memory"); return; }
	nenv = 0;
	for (size_t p = pos; p < len; p += strlen(payload + p) + 1) env[nenv++] = payload + p;

	char *end;
	unsigned long id = strtoul(fields[0], &end, 10);
	struct task *t = NULL;
	if (!*fields[0] || *end || id > 0xffffffffUL) send_error(fields[0], "task id is not a 32-bit number");
	else if (task_by_id((uint32_t)id)) send_error(fields[0], "task id already in use");
	else {
		for (int i = 0; i < MAX_TASKS && !t; i++)
			if (!tasks[i].used) t = &tasks[i];
		if (!t) send_error(fields[0], "more than %d tasks at once", MAX_TASKS);
	}
	int out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
	if (t && (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || pipe2(status, O_CLOEXEC) < 0)) {
		send_error(fields[0], "pipe: %s", strerror(errno));
		t = NULL;
	}
	pid_t pid = -1;
	if (t) {
		pid = fork();
		if (pid < 0) {
			send_error(fields[0], "fork: %s", strerror(errno));
			t = NULL;
		}
	}
	if (pid == 0) {
		/* The child: a new session (and group), the task's streams, cwd and env, then the shell. */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		setsid();
		/* Each task container runs as a user of its own in the pod's group: what a task makes in
		 * the shared workspace is the group's to change too, so the next task, in another image,
		 * can (the task may set its own umask). */
		umask(002);
		int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
		const char *step = "open /dev/null";
		if (devnull >= 0 && dup2(devnull, 0) >= 0 && dup2(out[1], 1) >= 0 && dup2(err[1], 2) >= 0) {
			/* Dumpable again, as exec would make it, for its own oom_score_adj: first without the
			 * runner's connection and the other tasks' pipes, which no task may take from it. */
			close(sock);
			close(sfd_global);
			close(out[0]);
			close(err[0]);
			close(status[0]);
			for (int i = 0; i < MAX_TASKS; i++) {
				if (tasks[i].out >= 0) close(tasks[i].out);
				if (tasks[i].err >= 0) close(tasks[i].err);
			}
			prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
			int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
			if (adj >= 0) {
				if (write(adj, "1000", 4) < 0) {}
				close(adj);
			}
			step = "chdir";
			if (chdir(fields[1]) == 0) {
				step = "exec";
				if (*fields[3]) {
					/* The task's own shell: the busybox stands in for the default one only. */
					char msg[1024];
					exec_shell_words(fields[3], fields[2], env, msg, sizeof msg);
					if (write(status[1], msg, strlen(msg)) < 0) {}
					_exit(127);
				}
				if (shell_is_busybox) {
					char *argv[] = {shell, "sh", "-c", fields[2], NULL};
					execve(shell, argv, env);
				} else {
					char *argv[] = {shell, "-c", fields[2], NULL};
					execve(shell, argv, env);
				}
			}
		}
		int e = errno;
		char msg[1024];
		int n = snprintf(msg, sizeof msg, "%s %s: %s",
		                 step, strcmp(step, "chdir") == 0 ? fields[1] : shell, strerror(e));
		if (n >= (int)sizeof msg) n = sizeof msg - 1;
		if (write(status[1], msg, (size_t)n) < 0) {}
		_exit(127);
	}
	free(env);
	if (out[1] >= 0) close(out[1]);
	if (err[1] >= 0) close(err[1]);
	if (status[1] >= 0) close(status[1]);
	if (!t) {
		if (out[0] >= 0) close(out[0]);
		if (err[0] >= 0) close(err[0]);
		if (status[0] >= 0) close(status[0]);
		return;
	}
	*t = (struct task){1, (uint32_t)id, pid, out[0], err[0], 0};
	char pidtext[16];
	snprintf(pidtext, sizeof pidtext, "%d", (int)pid);
	send_fields('P', 2, fields[0], pidtext);
	/* The status pipe closes on exec (O_CLOEXEC) or carries why the child could not exec. */
	char msg[1024];
	ssize_t n;
	while ((n = read(status[0], msg, sizeof msg - 1)) < 0 && errno == EINTR) {}
	close(status[0]);
	if (n > 0) {
		msg[n] = '\0';
		send_error(fields[0], "%s", msg);
	}
}

static void kill_command(char *payload, size_t len)
{
	char *target = payload;
	size_t tlen = strlen(target);
	if (tlen >= len) { send_error("", "kill frame without a signal"); return; }
	int sig = signal_number(payload + tlen + 1);
	if (sig < 0) { send_error("", "unknown signal %s", payload + tlen + 1); return; }
	if (strcmp(target, "tree") == 0) { kill_tree(sig); return; }
	char *end;
	long pid = strtol(target, &end, 10);
	if (!*target || *end || pid == 0 || pid == -1 || pid == self || pid == -self) {
		send_error("", "refused to signal %s", target);
		return;
	}
	if (kill((pid_t)pid, sig) < 0 && errno != ESRCH) send_error("", "kill %s: %s", target, strerror(errno));
}

static void fence_command(char *payload, size_t len)
{
	size_t cap = 1;
	for (size_t i = 0; i < len; i++)
		if (payload[i] == '\0') cap++;
	pid_t *spare = calloc(cap, sizeof *spare);
	size_t n = 0;
	if (!spare) { send_error("", "out of memory"); return; }
	for (size_t p = 0; p < len; p += strlen(payload + p) + 1) {
		long pid = strtol(payload + p, NULL, 10);
		if (pid > 0) spare[n++] = (pid_t)pid;
	}
	fence(spare, n);
	free(spare);
}

/* ---- input from the runner ---- */

static unsigned char *inbuf;
static size_t inlen;

/* The name the agent started under, taken back once the runner has taken its hello. */
static char own_name[16] = "agent";

/* The runner's proof that this connection is this container's agent (docs/agent.md, "The
 * connection"): the agent takes the nonce, sent on this connection only, as its process name, and
 * the runner reads name and user together in /proc/PID/status. A process's name is its own to set:
 * no task of another container's user can make this agent carry a nonce it was not sent. */
static void prove(const char *nonce, size_t len)
{
	int ok = len >= 1 && len <= 15;
	for (size_t i = 0; ok && i < len; i++) {
		char c = nonce[i];
		ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
	}
	if (!ok) {
		send_error("", "bad nonce frame");
		return;
	}
	if (prctl(PR_SET_NAME, nonce, 0, 0, 0) < 0) {
		send_error("", "PR_SET_NAME: %s", strerror(errno));
		return;
	}
	send_frame('N', "", 0);
}

static void handle_frame(char type, char *payload, size_t len)
{
	switch (type) {
	case 'N': prove(payload, len); break;
	case 'W': prctl(PR_SET_NAME, own_name, 0, 0, 0); break;
	case 'S': start(payload, len); break;
	case 'K': kill_command(payload, len); break;
	case 'Z': fence_command(payload, len); break;
	case 'Q': kill_descendants_and_exit(0); break;
	default: send_error("", "unknown frame type 0x%02x", (unsigned char)type);
	}
}

static void read_socket(void)
{
	ssize_t n;
	while ((n = read(sock, inbuf + inlen, 5 + MAX_PAYLOAD + 1 - inlen)) < 0 && errno == EINTR) {}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
	if (n <= 0) kill_descendants_and_exit(0);
	inlen += (size_t)n;
	while (inlen >= 5) {
		size_t len = (size_t)inbuf[1] << 24 | (size_t)inbuf[2] << 16 | (size_t)inbuf[3] << 8 | inbuf[4];
		if (len > MAX_PAYLOAD) {
			send_error("", "frame of %zu bytes is over the limit of %u", len, MAX_PAYLOAD);
			kill_descendants_and_exit(0);
		}
		if (inlen < 5 + len) return;
		char type = (char)inbuf[0];
		char *payload = malloc(len + 1);
		if (!payload) kill_descendants_and_exit(1);
		memcpy(payload, inbuf + 5, len);
		payload[len] = '\0';
		memmove(inbuf, inbuf + 5 + len, inlen - 5 - len);
		inlen -= 5 + len;
		handle_frame(type, payload, len);
		free(payload);
	}
}

static void read_stream(struct task *t, int err)
{
	static unsigned char buf[4 + CHUNK];
	int *fd = err ? &t->err : &t->out;
	ssize_t n;
	while ((n = read(*fd, buf + 4, CHUNK)) < 0 && errno == EINTR) {}
	if (n > 0) {
		buf[0] = (unsigned char)(t->id >> 24);
		buf[1] = (unsigned char)(t->id >> 16);
		buf[2] = (unsigned char)(t->id >> 8);
		buf[3] = (unsigned char)t->id;
		send_frame(err ? 'E' : 'O', buf, 4 + (size_t)n);
		return;
	}
	close(*fd);
	*fd = -1;
	char id[16];
	snprintf(id, sizeof id, "%u", t->id);
	send_fields('C', 2, id, err ? "err" : "out");
	release_if_done(t);
}

static void choose_shell(void)
{
	/* PLAYBOOK_AGENT_SHELL replaces /bin/sh as the shell looked for (tests only: an image without
	 * one is easiest to play by naming a path that does not exist). */
	const char *wanted = getenv("PLAYBOOK_AGENT_SHELL");
	if (!wanted || !*wanted) wanted = "/bin/sh";
	if (access(wanted, X_OK) == 0) {
		snprintf(shell, sizeof shell, "%s", wanted);
		return;
	}
	/* The agent's own busybox, beside the agent (/playbook/agent/busybox in a pod). */
	char exe[4000];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) *slash = '\0';
		snprintf(shell, sizeof shell, "%s/busybox", exe);
	} else {
		snprintf(shell, sizeof shell, "/playbook/agent/busybox");
	}
	shell_is_busybox = 1;
}

static void connect_runner(const char *path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof addr.sun_path) {
		fprintf(stderr, "agent: socket path too long: %s\n", path);
		exit(2);
	}
	strcpy(addr.sun_path, path);
	long long until = now_ms() + CONNECT_WAIT_MS;
	for (;;) {
		sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (sock < 0) { perror("agent: socket"); exit(1); }
		if (connect(sock, (struct sockaddr *)&addr, sizeof addr) == 0) return;
		int e = errno;
		close(sock);
		/* EACCES too: the runner makes its socket the pod group's just after it listens. */
		if ((e != ENOENT && e != ECONNREFUSED && e != EACCES) || now_ms() > until) {
			fprintf(stderr, "agent: connect %s: %s\n", path, strerror(e));
			exit(1);
		}
		pause_ms(CONNECT_RETRY_MS);
	}
}

/* The key the runner made for this container, in `keys/CONTAINER` beside its socket: the first
 * bytes on the connection. The runner removes it once this agent said hello, before any task runs. */
static void send_key(const char *socket_path, const char *container)
{
	char path[4200];
	const char *slash = strrchr(socket_path, '/');
	int dir = slash ? (int)(slash - socket_path) : 0;
	snprintf(path, sizeof path, "%.*s%skeys/%s", dir, socket_path, slash ? "/" : "", container);
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char key[KEY_LENGTH];
	ssize_t n = fd < 0 ? -1 : read(fd, key, sizeof key);
	if (fd >= 0) close(fd);
	if (n != KEY_LENGTH) {
		fprintf(stderr, "agent: no key for container %s at %s: %s\n", container, path,
		        n < 0 ? strerror(errno) : "short");
		exit(1);
	}
	if (write_all(sock, key, sizeof key) < 0) {
		perror("agent: write key");
		exit(1);
	}
}

/* Descriptors the agent inherited (beyond 0-2) would pass on to every task: close them first. Its
 * own are all close-on-exec. */
static void close_inherited(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d) {
		for (int fd = 3; fd < 1024; fd++) close(fd);
		return;
	}
	int fds[256], n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < 256) {
		int fd = atoi(e->d_name);
		if (fd > 2 && fd != dirfd(d)) fds[n++] = fd;
	}
	closedir(d);
	for (int i = 0; i < n; i++) close(fds[i]);
}

/* ---- --install: the runner container's postStart hook ---- */

/* Copies `from` to DIR/NAME through a temporary name and a rename, so that a task container
 * started after the hook never sees half a file, and a second run of the hook changes nothing. */
static int install_file(const char *from, const char *dir, const char *name)
{
	char tmp[4200], to[4200];
	snprintf(tmp, sizeof tmp, "%s/.%s.%d", dir, name, (int)getpid());
	snprintf(to, sizeof to, "%s/%s", dir, name);
	int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0) { fprintf(stderr, "agent --install: open %s: %s\n", from, strerror(errno)); return -1; }
	int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755);
	if (out < 0) {
		fprintf(stderr, "agent --install: create %s: %s\n", tmp, strerror(errno));
		close(in);
		return -1;
	}
	static char buf[CHUNK];
	ssize_t n;
	int failed = 0;
	while ((n = read(in, buf, sizeof buf)) != 0) {
		if (n < 0) { if (errno == EINTR) continue; failed = 1; break; }
		if (write_all(out, buf, (size_t)n) < 0) { failed = 1; break; }
	}
	close(in);
	/* The umask may have taken bits: the task containers' user runs it. */
	if (fchmod(out, 0755) < 0 || close(out) < 0) failed = 1;
	if (failed || rename(tmp, to) < 0) {
		fprintf(stderr, "agent --install: write %s: %s\n", to, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* The agent and, where it is beside it, the busybox a shell-less image's tasks run under. */
static int install(const char *dir)
{
	char exe[4000];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) { perror("agent --install: /proc/self/exe"); return 1; }
	exe[n] = '\0';
	if (install_file(exe, dir, "agent") < 0) return 1;
	char *slash = strrchr(exe, '/');
	if (slash) *slash = '\0';
	char busybox[4100];
	snprintf(busybox, sizeof busybox, "%s/busybox", slash ? exe : ".");
	if (access(busybox, R_OK) == 0 && install_file(busybox, dir, "busybox") < 0) return 1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--install") == 0) return install(argv[2]);
	if (argc != 3) {
		fprintf(stderr, "usage: agent SOCKET CONTAINER | agent --install DIR\n");
		return 2;
	}
	self = getpid();
	close_inherited();
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) perror("agent: PR_SET_CHILD_SUBREAPER");
	signal(SIGPIPE, SIG_IGN);
	/* SIGCHLD through a signalfd; SIGTERM, SIGINT and SIGHUP too: the runner decides when this ends
	 * (Q or the connection's end), so the kubelet's SIGTERM does not orphan running tasks. */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) { perror("agent: signalfd"); return 1; }
	sfd_global = sfd;
	inbuf = malloc(5 + MAX_PAYLOAD + 1);
	if (!inbuf) return 1;
	for (int i = 0; i < MAX_TASKS; i++) tasks[i].out = tasks[i].err = -1;

	choose_shell();
	/* Not dumpable: the tasks share this user, and may signal the agent (its container ends, and
	 * with it their task: a named failure), but not trace it, read or write its memory, take its
	 * connection to the runner (pidfd_getfd) or open its /proc files; exec makes each task dumpable. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) perror("agent: PR_SET_DUMPABLE");
	prctl(PR_GET_NAME, own_name, 0, 0, 0);
	connect_runner(argv[1]);
	send_key(argv[1], argv[2]);
	char pid[16], uid[16];
	snprintf(pid, sizeof pid, "%d", (int)self);
	snprintf(uid, sizeof uid, "%d", (int)getuid());
	send_hello(argv[2], pid, uid, shell);
	if (flush_until(0, -1) < 0) kill_descendants_and_exit(0);
	fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);

	struct pollfd fds[2 + 2 * MAX_TASKS];
	struct task *owner[2 + 2 * MAX_TASKS];
	for (;;) {
		nfds_t n = 0;
		fds[n++] = (struct pollfd){sock, (short)(POLLIN | (outlen > 0 ? POLLOUT : 0)), 0};
		fds[n++] = (struct pollfd){sfd, POLLIN, 0};
		/* The pipes are read only while the runner keeps up: else the tasks wait on them. */
		for (int i = 0; i < MAX_TASKS && outlen < OUT_HIGH; i++) {
			if (!tasks[i].used) continue;
			if (tasks[i].out >= 0) { owner[n] = &tasks[i]; fds[n++] = (struct pollfd){tasks[i].out, POLLIN, 0}; }
			if (tasks[i].err >= 0) { owner[n] = &tasks[i]; fds[n++] = (struct pollfd){tasks[i].err, POLLIN, 0}; }
		}
		if (poll(fds, n, -1) < 0) {
			if (errno == EINTR) continue;
			perror("agent: poll");
			kill_descendants_and_exit(1);
		}
		/* Output first, then exits: a leader's last bytes reach the runner before its X. */
		for (nfds_t i = 2; i < n; i++)
			if (fds[i].revents) read_stream(owner[i], fds[i].fd == owner[i]->err);
		if (fds[1].revents) {
			struct signalfd_siginfo info;
			while (read(sfd, &info, sizeof info) > 0) {}
			reap();
		}
		if ((fds[0].revents & POLLOUT) && flush_some() < 0) kill_descendants_and_exit(0);
		if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) read_socket();
	}
}
