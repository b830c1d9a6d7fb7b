// The fallback where a run cannot have a cgroup of its own (not root, no delegated cgroup v2): a
// child subreaper. Node cannot call prctl(PR_SET_CHILD_SUBREAPER) itself, so `playbook run`
// starts again under a few lines of perl (perl-base is on every Debian and Ubuntu system). Every
// process the run's tasks orphan (a double fork, a daemon) is then re-parented to the subreaper
// rather than to init, so it stays findable by ancestry, whatever it did to its session, group or
// environment; the runner ends it with the run, and the subreaper ends whatever is still left
// once the runner has exited. Where there is no perl or no known prctl syscall number, the run
// goes on without one and says so.
//
// Three processes, so that no kill of the runner leaves its tasks running:
// - the command the user started (its pid, its process group): it starts the keeper, passes it
//   the signals it is sent, and exits as the runner did;
// - the keeper, the subreaper, in a process group of its own, so that a SIGKILL of the command's
//   whole group (`timeout -k`, a CI job's cancel) does not reach it. It ends every process left
//   below it as soon as the runner has exited or the command is gone (the end of a pipe only the
//   command holds: a SIGKILL of the command alone), and kills the runner first in that case;
// - the runner, its child, back in the command's process group: a Ctrl-C at the terminal reaches
//   it as before, and it reads the terminal as the foreground job.
//
// All three run as the tasks' user: a task may stop or kill the keeper (or a cgroup's anchor),
// then the runner. Where the runner is root, `playbook run` starts under the keeper also when
// the run has a cgroup, and the keeper puts the runner and its tasks in a PID namespace of their
// own (and a mount namespace whose /proc shows it), which no task can leave: its first process
// (pid 1, a few more lines of the same perl) starts the runner, reaps the orphans, and exits
// with the runner, and the kernel then ends every process in the namespace. No task can signal
// the keeper or the command (they have no pid in the namespace) nor pid 1 (the kernel lets no
// process of a namespace send its init a signal the init does not handle: SIGKILL and SIGSTOP
// never reach it from inside); a task that kills the runner ends the namespace with it.
import { accessSync, constants, readdirSync, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";

/** Set by the subreaper to its pid for the runner it starts; never passed on to tasks (PLAYBOOK_*). */
export const SUBREAPER_VAR = "PLAYBOOK_SUBREAPER";
/**
 * Set by the keeper to its own pid, as the host numbers it, for a runner it started in a PID
 * namespace of its own (where the runner is pid 2, and its pid 1 the namespace's init).
 */
export const NAMESPACE_VAR = "PLAYBOOK_PID_NAMESPACE";

// PR_SET_CHILD_SUBREAPER is 36; prctl's syscall number depends on the architecture. A signal the
// kernel sends (Ctrl-C, a closed terminal: si_code SI_KERNEL) reaches the runner itself, which is
// in the command's process group: it is not passed on, or the runner would see each Ctrl-C twice
// ("again: kill at once"). One sent by a process (kill PID) is, through the keeper. A process that
// signals the whole group reaches the runner twice: the second cuts the grace short. The exit
// status is the runner's. The keeper waits at most 0.2 s between its looks at the command's pipe
// (a SIGCHLD wakes it at once): a signal that comes just before it sleeps is seen at the next look.
const SCRIPT = `
use strict; use warnings; use POSIX ();
my $arch = (POSIX::uname())[4];
my %nr = (x86_64 => 157, aarch64 => 167, riscv64 => 167, loongarch64 => 167);
my %unshare_nr = (x86_64 => 272, aarch64 => 97, riscv64 => 97, loongarch64 => 97);
my %mount_nr = (x86_64 => 165, aarch64 => 40, riscv64 => 40, loongarch64 => 40);
my $nr = $nr{$arch};
my $isolate = shift(@ARGV) eq "pidns";
sub runner { exec { $ARGV[0] } @ARGV or die "playbook: exec $ARGV[0]: $!\\n"; }
# Only whether prctl works here: the keeper becomes the subreaper.
runner() if !defined $nr || syscall($nr, 36, 1, 0, 0, 0) != 0;
syscall($nr, 36, 0, 0, 0, 0);
my $group = getpgrp;
pipe(my $gone, my $held) or runner();
my %signals = (INT => POSIX::SIGINT(), QUIT => POSIX::SIGQUIT(), TERM => POSIX::SIGTERM(), HUP => POSIX::SIGHUP(), USR1 => POSIX::SIGUSR1(), USR2 => POSIX::SIGUSR2());
sub pass_to { my ($to) = @_; my $pass = sub { my ($name, $info) = @_; kill $name, $to unless ref $info && $info->{code} == 128; }; POSIX::sigaction($_, POSIX::SigAction->new($pass, POSIX::SigSet->new, POSIX::SA_SIGINFO())) for values %signals; }
sub reap { my ($pid) = @_; my $got; do { $got = waitpid($pid, 0) } until $got == $pid || !$!{EINTR}; return $?; }
sub end_as { my ($status) = @_; if (my $signal = $status & 127) { POSIX::sigaction($_, POSIX::SigAction->new("DEFAULT")) for values %signals; kill $signal, $$; POSIX::_exit(128 + $signal); } POSIX::_exit(($status >> 8) & 255); }
# Held back until each process passes them on to the right one; the runner takes them as usual.
my $held_back = POSIX::SigSet->new(values %signals);
POSIX::sigprocmask(POSIX::SIG_BLOCK(), $held_back);
my $keeper = fork;
die "playbook: fork: $!\\n" unless defined $keeper;
if ($keeper != 0) { close $gone; pass_to($keeper); POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $held_back); end_as(reap($keeper)); }
close $held;
POSIX::setpgid(0, 0);
syscall($nr, 36, 1, 0, 0, 0);
$ENV{${SUBREAPER_VAR}} = $$;
# CLONE_NEWPID: the keeper's next child is pid 1 of a new PID namespace.
my $inside = $isolate && defined $unshare_nr{$arch} && syscall($unshare_nr{$arch}, 0x20000000) == 0;
my ($go, $went, $told, $tell);
if ($inside) { pipe($go, $went) && pipe($told, $tell) or die "playbook: pipe: $!\\n"; $ENV{${NAMESPACE_VAR}} = $$; }
my $runner = fork;
die "playbook: fork: $!\\n" unless defined $runner;
if ($runner == 0 && $inside) {
  # Pid 1 of the run's namespace: once the keeper has put it in the command's process group (a
  # group outside the namespace, which it cannot name itself), a mount namespace whose /proc is
  # this namespace's, then the runner; it reaps every orphan and exits with the runner, whose
  # status it tells the keeper. Its exit ends every process in the namespace.
  close $went; close $told;
  1 while !defined sysread($go, my $byte, 1) && $!{EINTR};
  close $go;
  # syscall takes its strings as buffers it may write: variables, not constants. MS_REC | MS_SLAVE:
  # the host's mounts still reach the run, the run's own do not leave it.
  my ($none, $root, $proc, $at, $type) = ("none", "/", "proc", "/proc", "proc");
  if (syscall($unshare_nr{$arch}, 0x00020000) != 0 || syscall($mount_nr{$arch}, $none, $root, 0, 0x80000 | 0x4000, 0) != 0 || syscall($mount_nr{$arch}, $proc, $at, $type, 2 | 4 | 8, 0) != 0) {
    print STDERR "playbook: could not mount /proc for the run's PID namespace ($!); PLAYBOOK_CONTAINMENT=cgroup runs without one\\n";
    POSIX::_exit(125);
  }
  $ENV{${SUBREAPER_VAR}} = 1;
  my $child = fork;
  die "playbook: fork: $!\\n" unless defined $child;
  if ($child == 0) { POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $held_back); close $tell; exec { $ARGV[0] } @ARGV or POSIX::_exit(127); }
  pass_to($child);
  POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $held_back);
  my $status;
  until (defined $status) { my $pid = waitpid(-1, 0); $status = $? if $pid == $child; last if $pid < 0 && !$!{EINTR}; }
  my $said = defined $status ? $status : 127 << 8;
  syswrite($tell, "$said\\n");
  POSIX::_exit(0);
}
if ($runner == 0) { POSIX::setpgid(0, $group); POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $held_back); exec { $ARGV[0] } @ARGV or POSIX::_exit(127); }
if ($inside) { POSIX::setpgid($runner, $group); close $go; close $went; close $tell; }
delete $ENV{${SUBREAPER_VAR}};
pass_to($runner);
POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $held_back);
$SIG{CHLD} = sub {};
my $status;
my $watch = ''; vec($watch, fileno($gone), 1) = 1;
until (defined $status) {
  while ((my $pid = waitpid(-1, POSIX::WNOHANG())) > 0) { $status = $? if $pid == $runner; }
  last if defined $status;
  # Readable only at its end: the command is gone, killed outright. So is the runner, then.
  if (select(my $ready = $watch, undef, undef, 0.2) > 0) { kill "KILL", $runner; $status = reap($runner); }
}
# In a namespace the runner's status is its pid 1's word; none when pid 1 was killed.
if ($inside) { my $said = <$told>; $status = $1 if defined $said && $said =~ /^(\\d+)$/; }
sub left {
  my (%children, %state);
  opendir(my $d, "/proc") or return ();
  for my $pid (grep { /^\\d+$/ } readdir $d) {
    open(my $f, "<", "/proc/$pid/stat") or next;
    my $stat = <$f>; close $f;
    next unless defined $stat && $stat =~ /\\) (\\S) (\\d+)/;
    $state{$pid} = $1; push @{ $children{$2} }, $pid;
  }
  my @todo = @{ $children{$$} || [] }; my @found;
  while (defined(my $pid = shift @todo)) {
    push @found, $pid if $state{$pid} ne "Z";
    push @todo, @{ $children{$pid} || [] };
  }
  return @found;
}
# Bounded: what SIGKILL does not end at once (another user's, D state) it will not end later.
my $until = time + 1;
while (my @left = left()) {
  kill "KILL", @left;
  1 while waitpid(-1, POSIX::WNOHANG()) > 0;
  last if time > $until;
  select(undef, undef, undef, 0.02);
}
1 while waitpid(-1, POSIX::WNOHANG()) > 0;
end_as($status);
`;

function onPath(name: string, path = process.env.PATH ?? ""): string | null {
  for (const dir of path.split(delimiter)) {
    if (!dir) continue;
    const file = join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return null;
}

/**
 * Starts this command again as the child of a subreaper, in place (process.execve: same pid, same
 * terminal; nothing read from stdin yet, or what was kept for it). With `isolate` (the runner is root and may make
 * namespaces), the runner and its tasks get a PID namespace of their own, whether or not the run
 * has a cgroup. Returns only when it does not: there is one already, the run is told to have no
 * containment (PLAYBOOK_CONTAINMENT=none) or no namespace (=cgroup, the machine's containment as
 * it is without one), `preferred()` says another containment holds and none is wanted, or there is no perl.
 */
export function relaunchUnderSubreaper(preferred: () => boolean, isolate = false): void {
  const env = process.env;
  if (env[SUBREAPER_VAR] !== undefined || env.PLAYBOOK_CONTAINMENT === "none") return;
  const inNamespace = isolate && env.PLAYBOOK_CONTAINMENT !== "cgroup" && process.geteuid?.() === 0;
  if (!inNamespace && preferred()) return;
  const perl = onPath("perl");
  if (perl === null || typeof process.execve !== "function") return;
  try {
    process.execve(
      perl,
      [
        "perl",
        "-e",
        SCRIPT,
        "--",
        inNamespace ? "pidns" : "plain",
        process.execPath,
        ...process.execArgv,
        ...process.argv.slice(1),
      ],
      // Marks the relaunched runner as one that has had its chance, even if the subreaper fails.
      { ...env, [SUBREAPER_VAR]: "" },
    );
  } catch {
    // Not started (a perl that cannot be run): the run goes on here, and says it has no containment.
  }
}

/**
 * The keeper that holds this runner's PID namespace (its pid, as the host numbers it), or null
 * where the runner has none. In one, the runner's parent is the namespace's pid 1.
 */
export function namespaceKeeper(env: NodeJS.ProcessEnv = process.env): number | null {
  const pid = Number(env[NAMESPACE_VAR]);
  return pid > 1 && process.ppid === 1 && process.pid !== 1 ? pid : null;
}

/** The subreaper this runner was started under (its pid), or null. */
export function subreaperPid(env: NodeJS.ProcessEnv = process.env): number | null {
  const pid = Number(env[SUBREAPER_VAR]);
  // 1: the init of the runner's own PID namespace, which every orphan of the run is re-parented to.
  return (pid > 1 || (pid === 1 && namespaceKeeper(env) !== null)) && pid === process.ppid ? pid : null;
}

/**
 * Whether this process may signal `pid`: root may; others when their real or effective uid is
 * the target's real or saved one (kill(2)). A task that became another user (sudo) is not
 * looked for again and again until a bound: nothing but its own end can end it.
 */
export function maySignal(pid: number): boolean {
  const euid = process.geteuid?.();
  const ruid = process.getuid?.();
  if (euid === undefined || euid === 0) return true;
  try {
    const line = /^Uid:\t(\d+)\t\d+\t(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "latin1"));
    if (!line) return true;
    const ids = [Number(line[1]), Number(line[2])];
    return ids.includes(euid) || ids.includes(ruid as number);
  } catch {
    return false;
  }
}

/** Live processes under `root` (by parent, recursively), other than `except` (the runner itself), that this process may signal. */
export function descendantsOf(root: number, except: number): number[] {
  const children = new Map<number, number[]>();
  const zombie = new Set<number>();
  for (const name of readdirSync("/proc")) {
    const code = name.charCodeAt(0);
    if (code < 48 || code > 57) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, "latin1");
    } catch {
      continue;
    }
    const after = stat.slice(stat.lastIndexOf(")") + 2).split(" ", 2);
    const pid = Number(name);
    const ppid = Number(after[1]);
    if (after[0] === "Z" || after[0] === "X") zombie.add(pid);
    const list = children.get(ppid);
    if (list) list.push(pid);
    else children.set(ppid, [pid]);
  }
  const found: number[] = [];
  const todo = [...(children.get(root) ?? [])];
  for (let pid = todo.pop(); pid !== undefined; pid = todo.pop()) {
    if (pid === except) {
      // The runner's own children are the tasks' leaders: theirs to find too.
      todo.push(...(children.get(pid) ?? []));
      continue;
    }
    if (!zombie.has(pid) && maySignal(pid)) found.push(pid);
    todo.push(...(children.get(pid) ?? []));
  }
  return found;
}
