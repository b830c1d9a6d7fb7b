// Kubernetes resource quantities ("500m", "1Gi", "2e3") as numbers, for comparing against maximums.

const QUANTITY_SUFFIX: Record<string, number> = {
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  "": 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

/** A resource quantity as a number, for comparing against a maximum ("500m" is 0.5, "1Gi" 2^30). */
export function quantityValue(quantity: string | number): number {
  if (typeof quantity === "number") return quantity;
  const match = /^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9.]+|[KMGTPE]i|[numkMGTPE])?$/.exec(
    quantity,
  );
  if (!match) return Number.NaN;
  const number = Number(match[1]);
  const suffix = match[2] ?? "";
  if (/^[eE]/.test(suffix)) return number * 10 ** Number(suffix.slice(1));
  return number * (QUANTITY_SUFFIX[suffix] ?? Number.NaN);
}
