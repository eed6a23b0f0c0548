/**
 * CONTRACT STUB (being implemented): portcullis.halt, resume, status.
 */
export {};
