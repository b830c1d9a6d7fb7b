// The informer's cache: objects by key, and a secondary index of keys by one value of each
// object (pods by the Playbook that owns them), as client-go's cache.Indexer.

export class IndexedStore<T> {
  private readonly cache = new Map<string, T>();
  private readonly index = new Map<string, Set<string>>();
  private readonly indexOf: ((object: T) => string | null) | undefined;

  constructor(indexOf?: (object: T) => string | null) {
    this.indexOf = indexOf;
  }

  get(key: string): T | undefined {
    return this.cache.get(key);
  }

  list(): T[] {
    return [...this.cache.values()];
  }

  values(): IterableIterator<T> {
    return this.cache.values();
  }

  /** A copy of the entries, so the store can change while they are walked. */
  entries(): [string, T][] {
    return [...this.cache];
  }

  byIndex(value: string): T[] {
    const keys = this.index.get(value);
    if (!keys) return [];
    const out: T[] = [];
    for (const key of keys) {
      const object = this.cache.get(key);
      if (object) out.push(object);
    }
    return out;
  }

  set(key: string, object: T): void {
    const old = this.cache.get(key);
    if (old && this.indexOf) this.unindex(key, old);
    this.cache.set(key, object);
    const value = this.indexOf?.(object);
    if (value) {
      let keys = this.index.get(value);
      if (!keys) {
        keys = new Set();
        this.index.set(value, keys);
      }
      keys.add(key);
    }
  }

  delete(key: string): void {
    const old = this.cache.get(key);
    if (old && this.indexOf) this.unindex(key, old);
    this.cache.delete(key);
  }

  private unindex(key: string, object: T): void {
    const value = this.indexOf?.(object);
    if (!value) return;
    const keys = this.index.get(value);
    keys?.delete(key);
    if (keys?.size === 0) this.index.delete(value);
  }
}
