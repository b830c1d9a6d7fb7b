import { existsSync, realpathSync, statSync } from "node:fs";
import path from "node:path";

/** A volume folder (or file, with subPath) on this machine, to appear at `target` in the container. */
export interface Mount {
  source: string;
  target: string;
  readOnly: boolean;
}

/** One step of a container's mount setup, run inside its private mount namespace. */
export type MountStep =
  | { kind: "tmpfs"; target: string }
  | { kind: "bind"; source: string; target: string; readOnly: boolean; file: boolean }
  /** A folder of this machine the process node needs (the checkout, Node, the pod's folder) shown again where a mount covered it. */
  | { kind: "expose"; path: string };

/**
 * Folders a container has its own copy of, so the process node may cover them with an empty
 * tmpfs inside the container's mount namespace to create a mount point that this machine lacks
 * (`/var/run/secrets/...` is `/run/secrets/...` here, and `/run/secrets` does not exist).
 */
export const HIDEABLE_FOLDERS = ["/run", "/tmp", "/var/tmp", "/mnt", "/media", "/srv"] as const;

const within = (child: string, parent: string): boolean =>
  child === parent || child.startsWith(parent === "/" ? "/" : `${parent}/`);

/** The path with symlinks of its existing part resolved, as the mount will see it. */
function resolveOnHost(target: string): string {
  let existing = target;
  const rest: string[] = [];
  while (!existsSync(existing)) {
    rest.unshift(path.basename(existing));
    existing = path.dirname(existing);
  }
  return path.join(realpathSync(existing), ...rest);
}

const hideableRoots = (): string[] =>
  HIDEABLE_FOLDERS.filter((folder) => existsSync(folder)).map((folder) => realpathSync(folder));

/**
 * Orders a container's mounts as runc does (shallowest first) and decides where a missing mount
 * point may be created: inside an earlier mount, or inside a tmpfs laid over the nearest
 * hideable folder. Never in this machine's own filesystem. `keepVisible` (the pod's folder:
 * volume sources, HOME, the termination-message file; the checkout and Node that run the
 * container's command) is shown again, through an `expose` step, where a mount covers it: a real
 * container has its own root filesystem, the process node only this machine's.
 */
export function planMounts(
  mounts: Mount[],
  keepVisible: string[],
): { steps: MountStep[] } | { error: string } {
  const sorted = mounts
    .map((mount) => ({ ...mount, target: path.resolve("/", mount.target) }))
    .sort((a, b) => a.target.split("/").length - b.target.split("/").length);
  const roots = hideableRoots();
  const tmpfs = new Set<string>();
  const placed: string[] = [];
  const binds: MountStep[] = [];
  for (const mount of sorted) {
    if (!existsSync(mount.source)) return { error: `volume source ${mount.source} does not exist` };
    const file = !statSync(mount.source).isDirectory();
    // Inside an earlier mount the host's view does not apply: the point is made in the volume.
    const inEarlier = placed.some((earlier) => within(mount.target, earlier));
    const target = inEarlier ? mount.target : resolveOnHost(mount.target);
    if (!inEarlier && !existsSync(target)) {
      const root = roots.find((candidate) => within(target, candidate) && candidate !== target);
      if (!root) {
        return {
          error: `mount point ${mount.target} does not exist on the process node's machine and is not under a folder it may hide (${HIDEABLE_FOLDERS.join(", ")})`,
        };
      }
      tmpfs.add(root);
    } else if (!inEarlier && statSync(target).isDirectory() === file) {
      return {
        error: `cannot mount ${file ? "a file" : "a folder"} at ${mount.target}: it is ${file ? "a folder" : "a file"} here`,
      };
    }
    placed.push(target);
    binds.push({ kind: "bind", source: mount.source, target, readOnly: mount.readOnly, file });
  }
  const steps: MountStep[] = [
    ...[...tmpfs].sort().map((target) => ({ kind: "tmpfs" as const, target })),
    ...binds,
  ];
  const covered = keepVisible
    .map((kept) => resolveOnHost(kept))
    .filter((kept) => steps.some((step) => step.kind !== "expose" && within(kept, step.target)))
    .sort((a, b) => a.length - b.length);
  const exposed: string[] = [];
  for (const kept of covered) if (!exposed.some((outer) => within(kept, outer))) exposed.push(kept);
  return { steps: [...steps, ...exposed.map((kept) => ({ kind: "expose" as const, path: kept }))] };
}

/**
 * Runs as the container's first process in its mount namespace: performs the steps, then execs the
 * container's argv in its working folder. A failed step writes the runtime's StartError message to
 * the given file and exits 128. Arguments: mount, mkdir, error file, working folder, stash, steps,
 * `--`, argv. First the machine's whole tree is bound at the stash and made the working folder:
 * sources are then read through it (`-c`: no canonicalizing, so the kernel resolves `./x` from
 * there), even once a mount (say an emptyDir at /tmp) covers where they live.
 */
const MOUNT_SCRIPT = `
m=$1 mk=$2 errfile=$3 cwd=$4 stash=$5
shift 5
fail() { printf '%s' "$1" > "$errfile"; exit 128; }
out=$("$m" --rbind / "$stash" 2>&1) || fail "error binding the machine's tree at $stash: $out"
cd "$stash" || fail "cannot enter $stash"
while [ "$1" != -- ]; do
  case $1 in
  tmpfs)
    out=$("$m" -t tmpfs -o mode=0755 tmpfs "$2" 2>&1) || fail "error mounting tmpfs at $2: $out"
    shift 2 ;;
  dir|file)
    if [ ! -e "$3" ]; then
      if [ "$1" = dir ]; then out=$("$mk" -p "$3" 2>&1) || fail "error creating mount point $3: $out"
      else
        parent=\${3%/*}
        out=$("$mk" -p "\${parent:-/}" 2>&1) && out=$( (true > "$3") 2>&1) || fail "error creating mount point $3: $out"
      fi
    fi
    out=$("$m" -c --bind ".$2" "$3" 2>&1) || fail "error mounting $2 at $3: $out"
    if [ "$4" = ro ]; then
      out=$("$m" -o remount,bind,ro "$3" 2>&1) || fail "error making $3 read-only: $out"
    fi
    shift 4 ;;
  expose)
    out=$("$mk" -p "$2" 2>&1) || fail "error creating $2 to show it again: $out"
    out=$("$m" -c --bind ".$2" "$2" 2>&1) || fail "error showing $2 again: $out"
    shift 2 ;;
  *) fail "unknown mount step $1" ;;
  esac
done
shift
cd "$cwd" 2>/dev/null || fail "chdir to cwd (\\"$cwd\\") set in config.json failed: no such file or directory"
exec "$@"
`;

export interface MountTools {
  shell: string;
  mount: string;
  mkdir: string;
}

/** The argv that performs the steps and then runs `argv` in `cwd`; `stash` is an empty folder of the pod's. */
export function mountWrapper(
  tools: MountTools,
  steps: MountStep[],
  errorFile: string,
  cwd: string,
  stash: string,
  argv: string[],
): [string, ...string[]] {
  const encoded = steps.flatMap((step) =>
    step.kind === "tmpfs"
      ? ["tmpfs", step.target]
      : step.kind === "expose"
        ? ["expose", step.path]
        : [step.file ? "file" : "dir", step.source, step.target, step.readOnly ? "ro" : "rw"],
  );
  return [
    tools.shell,
    "-c",
    MOUNT_SCRIPT,
    "mount-setup",
    tools.mount,
    tools.mkdir,
    errorFile,
    cwd,
    stash,
    ...encoded,
    "--",
    ...argv,
  ];
}
