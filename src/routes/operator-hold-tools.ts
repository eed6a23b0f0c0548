/**
 * CONTRACT STUB (being implemented): portcullis.list_holds, get_hold, resolve_hold.
 */
export {};
