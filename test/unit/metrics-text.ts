// Reading Prometheus exposition text as a scraper would: samples by name and label set.

/** The value of the sample `name{labels}` in exposition text, whatever the label order; undefined if absent. */
export function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries(
      [...(match[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((m) => [
        m[1],
        m[2],
      ]),
    );
    const keys = Object.keys(labels);
    if (Object.keys(found).length !== keys.length) continue;
    if (keys.every((key) => found[key] === labels[key])) return Number(match[3]);
  }
  return undefined;
}

/** Label names on every sample of `name` (histograms: its _bucket, _sum and _count). */
export function labelNamesOf(text: string, name: string): Set<string> {
  const names = new Set<string>();
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name}_`)) continue;
    for (const m of line.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) if (m[1]) names.add(m[1]);
  }
  return names;
}
