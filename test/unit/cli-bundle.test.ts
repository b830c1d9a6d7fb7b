// The `playbook` that users run is the bundle `npm run build` makes (dist/bin/playbook.js, the
// package's bin and the image's command): it needs no node_modules, and each command loads only
// its own chunks, so `--version` compiles one small file and only `playbook controller` loads
// client-node, pino and prom-client.
import { isAscii } from "node:buffer";
import { spawnSync } from "node:child_process";
import {
  accessSync,
  chmodSync,
  constants,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { isBuiltin } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI } from "../support/cli.js";

const ROOT = path.join(import.meta.dirname, "../..");
const BUNDLE_DIR = path.dirname(CLI);
const { version } = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { version: string };

let scratch: string;
let hook: string;
let manifest: string;

beforeAll(() => {
  scratch = mkdtempSync(path.join(tmpdir(), "cli-bundle-"));
  // Records every module file the command loads, dynamic imports included, as Node's own module
  // hooks see them: a chunk imported statically by mistake shows up here. The commands' script
  // (commands.js) is run through node:vm, not loaded as a module: the files the command opens
  // show it.
  hook = path.join(scratch, "record-loads.mjs");
  writeFileSync(
    hook,
    `import { registerHooks, syncBuiltinESMExports } from "node:module";
import fs from "node:fs";
import { pathToFileURL } from "node:url";
const { appendFileSync } = fs;
registerHooks({
  load(url, context, nextLoad) {
    if (url.startsWith("file:")) appendFileSync(process.env.LOADS_FILE, url + "\\n");
    return nextLoad(url, context);
  },
});
const openSync = fs.openSync;
fs.openSync = (file, ...rest) => {
  if (typeof file === "string" && file.endsWith(".js")) appendFileSync(process.env.LOADS_FILE, pathToFileURL(file).href + "\\n");
  return openSync(file, ...rest);
};
syncBuiltinESMExports();
// The built-in modules the command loaded, when asked.
process.on("exit", () => {
  if (process.env.BUILTINS_FILE) fs.writeFileSync(process.env.BUILTINS_FILE, process.moduleLoadList.join("\\n"));
});
`,
  );
  manifest = path.join(scratch, "one.yaml");
  writeFileSync(
    manifest,
    "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata: {name: one}\nspec:\n  tasks: [{name: hello, run: 'echo hello'}]\n",
  );
});

afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

/**
 * The source files bundled into the loaded files, from their source maps, relative to the repo.
 * A chunk without a map holds no module of ours or of a package (the re-exports of a dynamic
 * import, rolldown's runtime helpers).
 */
function sourcesOf(files: string[]): string[] {
  return files.flatMap((file) => {
    if (!existsSync(`${file}.map`)) return [];
    const map = JSON.parse(readFileSync(`${file}.map`, "utf8")) as { sources: string[] };
    return map.sources.map((source) => path.relative(ROOT, path.resolve(path.dirname(file), source)));
  });
}

/** What only the controller needs: our controller's modules but its config, and its packages. */
const CONTROLLER_ONLY =
  /^(src\/controller\/(?!config\.ts$)|src\/cli\/controller-run\.ts$|node_modules\/(@kubernetes|pino|prom-client)\/)/;

let runs = 0;
/** `playbook <args>` from the bundle at `cli`, and the files it loaded, by name. */
function playbook(args: string[], options: { cli?: string; env?: NodeJS.ProcessEnv } = {}) {
  const loadsFile = path.join(scratch, `loads-${++runs}.txt`);
  writeFileSync(loadsFile, "");
  const result = spawnSync(process.execPath, ["--import", hook, options.cli ?? CLI, ...args], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, LOADS_FILE: loadsFile, ...options.env },
    encoding: "utf8",
    timeout: 60_000,
  });
  const loaded = readFileSync(loadsFile, "utf8")
    .split("\n")
    .filter((line) => line !== "" && fileURLToPath(line) !== hook)
    .map((line) => fileURLToPath(line));
  return { ...result, loaded, names: loaded.map((file) => path.basename(file)) };
}

describe("the playbook bundle", () => {
  it("is built as an executable Node script at the package's bin", () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as {
      bin: { playbook: string };
    };
    expect(path.join(ROOT, pkg.bin.playbook)).toBe(CLI);
    expect(readFileSync(CLI, "utf8").split("\n")[0]).toBe("#!/usr/bin/env node");
    accessSync(CLI, constants.X_OK);
  });

  it("prints package.json's version for --version from its one entry file, loading no chunk", () => {
    const run = playbook(["--version"]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toBe(`${version}\n`);
    expect(run.stderr).toBe("");
    expect(run.loaded).toEqual([CLI]);
    expect(sourcesOf(run.loaded).sort()).toEqual([
      "src/cli/code-cache.ts",
      "src/cli/main.ts",
      "src/cli/version.ts",
    ]);
  });

  it("prints the same bytes for -V and for --version when commander parses them", () => {
    // With a second argument the program, and commander's own --version, answer instead.
    const viaCommander = playbook(["--version", "run"]);
    expect(viaCommander.status, viaCommander.stderr).toBe(0);
    expect(viaCommander.names).toContain("cli.js");
    expect(viaCommander.stdout).toBe(playbook(["--version"]).stdout);
    expect(playbook(["-V"]).stdout).toBe(`${version}\n`);
  });

  it("runs and validates a Playbook from the commands' script, without the controller's modules", () => {
    const run = playbook(["run", "-f", manifest]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain("hello");
    // As root the run starts Node a second time, under its keeper in a PID namespace of its own
    // (src/pod-runner/containment.ts): each start loads the same two files.
    const starts = run.names.length / 2;
    expect([1, 2]).toContain(starts);
    expect(run.names).toEqual(Array.from({ length: starts }, () => ["playbook.js", "commands.js"]).flat());
    expect(sourcesOf(run.loaded)).toContain("src/pod-runner/run.ts");
    expect(sourcesOf(run.loaded).filter((source) => CONTROLLER_ONLY.test(source))).toEqual([]);
    const validate = playbook(["validate", "-f", manifest]);
    expect(validate.status, validate.stderr).toBe(0);
    expect(validate.names).toEqual(["playbook.js", "commands.js"]);
    expect(sourcesOf(validate.loaded).filter((source) => CONTROLLER_ONLY.test(source))).toEqual([]);
  });

  it("starts a second run from a code cache of the commands' script that the first run wrote", () => {
    const cacheRoot = path.join(scratch, "cache-second-run");
    const env = { XDG_CACHE_HOME: cacheRoot };
    const first = playbook(["run", "-f", manifest], { env });
    expect(first.status, first.stderr).toBe(0);
    const folder = path.join(cacheRoot, "playbook-controller", "code-cache");
    const caches = readdirSync(folder).filter((name) => name.startsWith("commands-run-"));
    expect(caches).toHaveLength(1);
    // Private: code read from it runs.
    expect(statSync(folder).mode & 0o777).toBe(0o700);
    expect(statSync(path.join(folder, caches[0] as string)).mode & 0o777).toBe(0o600);
    const second = playbook(["run", "-f", manifest], { env });
    expect(second.status, second.stderr).toBe(0);
    expect(second.stdout).toBe(first.stdout);
    // The same lines, but for times and the run's own cgroup name (a cgroup per run).
    const steady = (stderr: string) =>
      stderr
        // A run whose runner another test killed outright leaves its cgroup to the next run's
        // clean-up, which says so: not this runner's doing.
        .replace(/^playbook: (removed )?the cgroup of an earlier run .*\n/gm, "")
        .replace(/\d+ms/g, "")
        .replace(/playbook-(?:ns)?[0-9a-f]+-[0-9a-f]+/g, "playbook-ID")
        // The keeper of a run in a PID namespace of its own is a process of its own each run.
        .replace(/\(pid \d+\)/g, "(pid N)")
        // What the task cost differs run to run (its peak is a sample).
        .replace(/ \(cpu [^)]*\)/g, "");
    expect(steady(second.stderr)).toBe(steady(first.stderr));
    // validate keeps its own, and pod-runner shares run's.
    expect(playbook(["validate", "-f", manifest], { env }).status).toBe(0);
    expect(
      readdirSync(folder)
        .filter((name) => name.startsWith("commands-"))
        .sort(),
    ).toEqual([caches[0], expect.stringMatching(/^commands-validate-/)]);
  });

  it("runs as before from a damaged cache, and replaces it", () => {
    const cacheRoot = path.join(scratch, "cache-damaged");
    const env = { XDG_CACHE_HOME: cacheRoot };
    const first = playbook(["run", "-f", manifest], { env });
    expect(first.status, first.stderr).toBe(0);
    const folder = path.join(cacheRoot, "playbook-controller", "code-cache");
    const [name] = readdirSync(folder);
    const file = path.join(folder, name as string);
    const good = readFileSync(file);
    writeFileSync(file, Buffer.alloc(good.length, 7), { mode: 0o600 });
    const damaged = playbook(["run", "-f", manifest], { env });
    expect(damaged.status, damaged.stderr).toBe(0);
    expect(damaged.stdout).toBe(first.stdout);
    expect(readFileSync(file).equals(Buffer.alloc(good.length, 7))).toBe(false);
  });

  it("neither reads nor writes a cache in a folder that others can write", () => {
    const cacheRoot = path.join(scratch, "cache-shared");
    const folder = path.join(cacheRoot, "playbook-controller", "code-cache");
    mkdirSync(folder, { recursive: true });
    chmodSync(folder, 0o777);
    const run = playbook(["run", "-f", manifest], { env: { XDG_CACHE_HOME: cacheRoot } });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain("hello");
    expect(readdirSync(folder)).toEqual([]);
  });

  it("loads the controller's chunk for playbook controller", () => {
    const run = playbook(["controller"], { env: { KUBECONFIG: path.join(scratch, "no-such-kubeconfig") } });
    expect(run.names).toContain("controller.js");
    expect(sourcesOf(run.loaded)).toContain("src/controller/controller.ts");
    expect(run.stderr).toContain("no-such-kubeconfig");
    expect(run.status).toBe(1);
  });

  it.each(["wait", "describe"])(
    "runs playbook %s from the cluster commands' script, without the controller's modules",
    (command) => {
      const run = playbook([command, "nightly", "--kubeconfig", path.join(scratch, "no-such-kubeconfig")]);
      expect(run.stderr).toContain("no-such-kubeconfig: no such file");
      expect(run.status).toBe(2);
      expect(run.names).toEqual(["playbook.js", "cluster-commands.js"]);
      expect(sourcesOf(run.loaded)).toContain("src/cli/cluster/connection.ts");
      // client-node's KubeConfig it needs; the controller, its logger and its metrics it does not.
      const controllers = /^(src\/controller\/|node_modules\/(pino|prom-client)\/)/;
      expect(sourcesOf(run.loaded).filter((source) => controllers.test(source))).toEqual([]);
    },
  );

  it("starts the cluster commands from code caches of their script that their first runs wrote", () => {
    const cacheRoot = path.join(scratch, "cache-cluster");
    const kubeconfig = path.join(scratch, "refused.kubeconfig");
    // A server that refuses at once: the commands do their work up to the call, and end 3.
    writeFileSync(
      kubeconfig,
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]",
        "users: [{name: u, user: {token: t}}]",
        "contexts: [{name: x, context: {cluster: c, user: u, namespace: ns}}]",
        "current-context: x",
      ].join("\n"),
    );
    const env = { XDG_CACHE_HOME: cacheRoot, KUBECONFIG: kubeconfig, NODE_DEBUG: "playbook" };
    const folder = path.join(cacheRoot, "playbook-controller", "code-cache");
    const first = playbook(["submit", "-f", manifest], { env });
    expect(first.status, first.stderr).toBe(3);
    expect(first.stderr).toContain("cannot reach the API server");
    expect(first.stderr).toMatch(/code cache: wrote .*cluster-commands-submit-/);
    const second = playbook(["submit", "-f", manifest], { env });
    expect(second.status, second.stderr).toBe(3);
    expect(second.stderr).toMatch(/code cache: used .*cluster-commands-submit-/);
    // wait, cancel, logs and cron trigger share one cache of their own.
    expect(playbook(["wait", "one"], { env }).stderr).toMatch(/code cache: wrote .*cluster-commands-follow-/);
    expect(playbook(["logs", "one"], { env }).stderr).toMatch(/code cache: used .*cluster-commands-follow-/);
    expect(readdirSync(folder).sort()).toEqual([
      expect.stringMatching(/^cluster-commands-follow-v[\d.]+-\w+-[0-9a-f]{64}\.cache$/),
      expect.stringMatching(/^cluster-commands-submit-v[\d.]+-\w+-[0-9a-f]{64}\.cache$/),
    ]);
  });

  it("loads nothing at run time from outside the bundle: each require is a built-in or a file beside it", () => {
    const outside: string[] = [];
    for (const file of readdirSync(BUNDLE_DIR).filter((name) => /\.c?js$/.test(name))) {
      const code = readFileSync(path.join(BUNDLE_DIR, file), "utf8");
      for (const [, specifier] of code.matchAll(/\brequire\("([^"]+)"\)/g)) {
        if (specifier === undefined || specifier.startsWith("./")) continue;
        if (isBuiltin(specifier)) continue;
        outside.push(`${file}: require("${specifier}")`);
      }
    }
    // An optional package left to be found (debug's supports-color was) is searched for in every
    // folder above the install at each start, and one found there would run.
    expect(outside).toEqual([]);
  });

  it("writes the commands' scripts in ASCII, which a start reads without decoding UTF-8", () => {
    for (const script of ["commands.js", "cluster-commands.js"]) {
      expect(isAscii(readFileSync(path.join(BUNDLE_DIR, script))), script).toBe(true);
    }
  });

  it("leaves undici (undici.cjs) unloaded: only client-node's fetch uses it, which the commands do not", () => {
    const kubeconfig = (proxy: string) => {
      const file = path.join(scratch, `proxy-${proxy ? "socks" : "none"}.kubeconfig`);
      writeFileSync(
        file,
        [
          "apiVersion: v1",
          "kind: Config",
          `clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true${proxy}}}]`,
          "users: [{name: u, user: {token: t}}]",
          "contexts: [{name: x, context: {cluster: c, user: u}}]",
          "current-context: x",
        ].join("\n"),
      );
      return file;
    };
    // Directly, and through a SOCKS proxy-url (client-node's agent for node:https is not undici's).
    for (const proxy of ["", ", proxy-url: 'socks5://127.0.0.1:1'"]) {
      const run = playbook(["wait", "nightly", "--kubeconfig", kubeconfig(proxy)]);
      expect(run.stderr).toContain("cannot reach the API server");
      expect(run.status).toBe(3);
      expect(run.names).toEqual(["playbook.js", "cluster-commands.js"]);
    }
    // Where it would be used, it is there: a whole module beside the script.
    const loaded = spawnSync(
      process.execPath,
      ["-e", `console.log(typeof require(${JSON.stringify(path.join(BUNDLE_DIR, "undici.cjs"))}).Agent)`],
      { encoding: "utf8" },
    );
    expect(loaded.stdout.trim(), loaded.stderr).toBe("function");
  });

  it("starts a cluster command without undici, which node:http's unused WebSocket would load, nor readline and dns until they are used", () => {
    const kubeconfig = path.join(scratch, "unreachable.kubeconfig");
    writeFileSync(
      kubeconfig,
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]",
        "users: [{name: u, user: {token: t}}]",
        "contexts: [{name: x, context: {cluster: c, user: u}}]",
        "current-context: x",
      ].join("\n"),
    );
    const builtins = path.join(scratch, "builtins.txt");
    const run = playbook(["wait", "nightly", "--kubeconfig", kubeconfig], {
      env: { BUILTINS_FILE: builtins },
    });
    expect(run.stderr).toContain("cannot reach the API server");
    expect(run.status).toBe(3);
    const loaded = readFileSync(builtins, "utf8").split("\n");
    // It did use node:http (its request failed), through process.getBuiltinModule.
    expect(loaded).toContain("NativeModule http");
    expect(loaded.filter((name) => name.includes("undici"))).toEqual([]);
    // A watch's lines (readline) and a proxy's lookups (dns) are loaded on first use, which a
    // command that never had an answer does not reach (scripts/bundle-cli.ts, lazyBuiltins).
    expect(loaded).not.toContain("NativeModule readline");
    expect(loaded).not.toContain("NativeModule dns");
  });

  it("is also the kubectl plugin: bin kubectl-playbook, whose usage says kubectl playbook", () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as {
      bin: Record<string, string>;
    };
    expect(pkg.bin["kubectl-playbook"]).toBe(pkg.bin.playbook);
    const plugin = path.join(mkdtempSync(path.join(tmpdir(), "cli-bundle-plugin-")), "kubectl-playbook");
    symlinkSync(CLI, plugin);
    const help = playbook(["wait", "--help"], { cli: plugin });
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^Usage: kubectl playbook wait \[options\] <NAME>$/m);
    const usage = playbook(["wait"], { cli: plugin });
    expect(usage.status).toBe(2);
    expect(usage.stderr).toBe(
      "error: missing required argument 'NAME'\nSee 'kubectl playbook wait --help' for usage.\n",
    );
  });

  it("runs every command from a folder of its own, with no node_modules anywhere above it", () => {
    const alone = mkdtempSync(path.join(tmpdir(), "cli-bundle-alone-"));
    try {
      cpSync(BUNDLE_DIR, alone, { recursive: true, filter: (file) => !file.endsWith(".map") });
      const cli = path.join(alone, "playbook.js");
      const run = playbook(["run", "-f", manifest, "-o", "json"], { cli });
      expect(run.status, run.stderr).toBe(0);
      expect(JSON.parse(run.stdout).status.phase).toBe("Succeeded");
      const controller = playbook(["controller"], {
        cli,
        env: { KUBECONFIG: path.join(scratch, "no-such-kubeconfig") },
      });
      expect(controller.stderr).toContain("no-such-kubeconfig");
      expect(controller.names).toContain("controller.js");
      for (const file of [...run.loaded, ...controller.loaded]) expect(path.dirname(file)).toBe(alone);
    } finally {
      rmSync(alone, { recursive: true, force: true });
    }
  });
});
