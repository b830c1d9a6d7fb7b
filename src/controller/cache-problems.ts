// What /readyz says of one informer that is not current: its resource, its namespace and why.
export function describeProblem(
  resource: string,
  namespace: string,
  informer: { problem: string | undefined },
): string[] {
  const problem = informer.problem;
  if (problem === undefined) return [];
  return [`${resource}${namespace ? ` in ${namespace}` : ""}: ${problem}`];
}
