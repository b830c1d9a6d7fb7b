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
import { accessSync, constants, readdirSync, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";

/** Set by the subreaper to its pid for the runner it starts; never passed on to tasks (PLAYBOOK_*). */
export const SUBREAPER_VAR = "PLAYBOOK_SUBREAPER";

// PR_SET_CHILD_SUBREAPER is 36; prctl's syscall number depends on the architecture. A signal the
// kernel sends (Ctrl-C, a closed terminal: si_code SI_KERNEL) reaches the runner itself, which is
// in the command's process group: it is not passed on, or the runner would see each Ctrl-C twice
// ("again: kill at once"). One sent by a process (kill PID) is, through the keeper. A process that
// signals the whole group reaches the runner twice: the second cuts the grace short. The exit
// status is the runner's. The keeper waits at most 0.2 s between its looks at the command's pipe
// (a SIGCHLD wakes it at once): a signal that comes just before it sleeps is seen at the next look.
const SCRIPT = `
use strict; use warnings; use POSIX ();
my %nr = (x86_64 => 157, aarch64 => 167, riscv64 => 167, loongarch64 => 167);
my $nr = $nr{(POSIX::uname())[4]};
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
my $runner = fork;
die "playbook: fork: $!\\n" unless defined $runner;
if ($runner == 0) { POSIX::setpgid(0, $group); POSIX::sigprocmask(POSIX::SIG_UNBLOCK(), $held_back); exec { $ARGV[0] } @ARGV or POSIX::_exit(127); }
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
 * terminal, nothing read from stdin yet). Returns only when it does not: there is one already,
 * the run is told to have no containment, `preferred()` says another containment holds, or there
 * is no perl.
 */
export function relaunchUnderSubreaper(preferred: () => boolean): void {
  const env = process.env;
  if (env[SUBREAPER_VAR] !== undefined || env.PLAYBOOK_CONTAINMENT === "none") return;
  if (preferred()) return;
  const perl = onPath("perl");
  if (perl === null || typeof process.execve !== "function") return;
  try {
    process.execve(
      perl,
      ["perl", "-e", SCRIPT, "--", process.execPath, ...process.execArgv, ...process.argv.slice(1)],
      // Marks the relaunched runner as one that has had its chance, even if the subreaper fails.
      { ...env, [SUBREAPER_VAR]: "" },
    );
  } catch {
    // Not started (a perl that cannot be run): the run goes on here, and says it has no containment.
  }
}

/** The subreaper this runner was started under (its pid), or null. */
export function subreaperPid(env: NodeJS.ProcessEnv = process.env): number | null {
  const pid = Number(env[SUBREAPER_VAR]);
  return pid > 1 && pid === process.ppid ? pid : null;
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
