// The fallback where a run cannot have a cgroup of its own (not root, no delegated cgroup v2): a
// child subreaper. Node cannot call prctl(PR_SET_CHILD_SUBREAPER) itself, so `playbook run`
// starts again under a few lines of perl (perl-base is on every Debian and Ubuntu system) that
// become a subreaper and start the runner as their child. Every process the run's tasks orphan
// (a double fork, a daemon) is then re-parented to the subreaper rather than to init, so it stays
// findable by ancestry, whatever it did to its session, group or environment; the runner ends it
// with the run, and the subreaper ends whatever is still left once the runner has exited (even
// one killed by SIGKILL). Where there is no perl or no known prctl syscall number, the run goes on
// without one and says so.
import { accessSync, constants, readdirSync, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";

/** Set by the subreaper to its pid for the runner it starts; never passed on to tasks (PLAYBOOK_*). */
export const SUBREAPER_VAR = "PLAYBOOK_SUBREAPER";

// PR_SET_CHILD_SUBREAPER is 36; prctl's syscall number depends on the architecture. A signal the
// kernel sends (Ctrl-C, a closed terminal: si_code SI_KERNEL) reaches the runner itself, which is
// in the subreaper's process group: it is not passed on, or the runner would see each Ctrl-C twice
// ("again: kill at once"). One sent by a process (kill PID) is. A process that signals the whole
// group reaches the runner twice: the second cuts the grace short. The exit status is the runner's.
const SCRIPT = `
use strict; use warnings; use POSIX ();
my %nr = (x86_64 => 157, aarch64 => 167, riscv64 => 167, loongarch64 => 167);
my $nr = $nr{(POSIX::uname())[4]};
if (!defined $nr || syscall($nr, 36, 1, 0, 0, 0) != 0) { exec { $ARGV[0] } @ARGV or die "playbook: exec $ARGV[0]: $!\\n"; }
$ENV{${SUBREAPER_VAR}} = $$;
my $runner = fork;
die "playbook: fork: $!\\n" unless defined $runner;
if ($runner == 0) { exec { $ARGV[0] } @ARGV or POSIX::_exit(127); }
delete $ENV{${SUBREAPER_VAR}};
my $pass = sub { my ($name, $info) = @_; kill $name, $runner unless ref $info && $info->{code} == 128; };
my %signals = (INT => POSIX::SIGINT(), QUIT => POSIX::SIGQUIT(), TERM => POSIX::SIGTERM(), HUP => POSIX::SIGHUP(), USR1 => POSIX::SIGUSR1(), USR2 => POSIX::SIGUSR2());
POSIX::sigaction($_, POSIX::SigAction->new($pass, POSIX::SigSet->new, POSIX::SA_SIGINFO())) for values %signals;
my $status = 0;
for (;;) {
  my $pid = waitpid(-1, 0);
  if ($pid == $runner) { $status = $?; last; }
  if ($pid == -1) { next if $!{EINTR}; last; }
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
if (my $signal = $status & 127) { POSIX::sigaction($_, POSIX::SigAction->new("DEFAULT")) for values %signals; kill $signal, $$; POSIX::_exit(128 + $signal); }
POSIX::_exit(($status >> 8) & 255);
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
