// The package's version, for --version. The bundle has it written in at build time
// (scripts/bundle-cli.ts defines __PLAYBOOK_VERSION__); the tsc build reads package.json.

declare const __PLAYBOOK_VERSION__: string | undefined;

export function packageVersion(): string {
  if (typeof __PLAYBOOK_VERSION__ === "string") return __PLAYBOOK_VERSION__;
  // Not an import of node:fs: in the bundle it would stay as one, and Node's facade for it loads
  // the fs streams, a start's milliseconds for nothing (see code-cache.ts).
  const text = process
    .getBuiltinModule("node:fs")
    .readFileSync(new URL("../../../package.json", import.meta.url), "utf8");
  return (JSON.parse(text) as { version: string }).version;
}
