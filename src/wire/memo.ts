/**
 * The one bounded map every per-isolate memo uses: at most `max` entries, the oldest going first
 * (oldest by when it was last written, or last read too with `lru`), each served for `ttlMs` at
 * most when a lifetime is given (for the map, or for one entry), the clock injectable for tests.
 * An expired entry reads as absent and is dropped when read. Owns nothing but the entries; what
 * an entry means (and whether a stale one may still serve) stays with its caller. Must never:
 * hold more than `max` entries, serve an entry past its lifetime, or keep a promise for a caller
 * that did not put one there (memos hold settled values: Workers never settles for one request a
 * promise whose request has ended).
 */
export interface MemoOptions {
  /** Most entries kept (at least 1); past it the oldest goes first. */
  max: number;
  /** How long an entry is served, counted from its `at` (when it was set, unless given); none: until it is evicted. */
  ttlMs?: number;
  /** Reads refresh an entry too (least recently used goes first); otherwise only writes do. */
  lru?: boolean;
  /** The clock, in ms (Date.now unless a test drives it). */
  now?: () => number;
}

/** How one write stamps its entry: when its age starts (default: now), and a lifetime of its own (null: none). */
export interface MemoStamp {
  at?: number;
  ttlMs?: number | null;
}

interface Slot<V> {
  value: V;
  at: number;
  ttlMs: number | undefined;
}

export class Memo<K, V> {
  readonly #slots = new Map<K, Slot<V>>();
  readonly #max: number;
  readonly #ttlMs: number | undefined;
  readonly #lru: boolean;
  readonly #now: () => number;

  constructor(opts: MemoOptions) {
    if (!(opts.max >= 1)) throw new RangeError("a memo keeps at least one entry");
    this.#max = opts.max;
    this.#ttlMs = opts.ttlMs;
    this.#lru = opts.lru === true;
    this.#now = opts.now ?? Date.now;
  }

  /** The entry's value, or undefined when there is none or it has expired (then it is dropped). */
  get(key: K): V | undefined {
    const slot = this.#slots.get(key);
    if (!slot) return undefined;
    if (slot.ttlMs !== undefined && !(this.#now() - slot.at < slot.ttlMs)) {
      this.#slots.delete(key);
      return undefined;
    }
    if (this.#lru) {
      this.#slots.delete(key);
      this.#slots.set(key, slot);
    }
    return slot.value;
  }

  has(key: K): boolean {
    return this.get(key) !== undefined;
  }

  /** Writes the entry as the newest; a new key past `max` drops the oldest first. */
  set(key: K, value: V, stamp: MemoStamp = {}): this {
    this.#slots.delete(key);
    while (this.#slots.size >= this.#max) {
      const oldest = this.#slots.keys().next();
      if (oldest.done) break;
      this.#slots.delete(oldest.value);
    }
    const ttlMs = stamp.ttlMs === null ? undefined : (stamp.ttlMs ?? this.#ttlMs);
    this.#slots.set(key, { value, at: stamp.at ?? this.#now(), ttlMs });
    return this;
  }

  delete(key: K): boolean {
    return this.#slots.delete(key);
  }

  clear(): void {
    this.#slots.clear();
  }

  /** Entries held, expired ones not yet read included. */
  get size(): number {
    return this.#slots.size;
  }

  /** The keys held, oldest first (expired ones not yet read included). */
  keys(): K[] {
    return [...this.#slots.keys()];
  }
}
