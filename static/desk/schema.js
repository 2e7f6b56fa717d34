// A small JSON Schema checker for the edit form: the keywords the tools' schemas use
// (type, properties, required, additionalProperties, minLength, maxLength, minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, enum, items). A hint while typing: the
// server checks the full schema when the decision arrives, and its answer is the one that counts.
(function () {
  "use strict";
  function typeOf(v) {
    if (v === null) return "null";
    if (Array.isArray(v)) return "array";
    if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
    return typeof v; // string, boolean, object
  }

  function fits(type, v) {
    const t = typeOf(v);
    return t === type || (type === "number" && t === "integer");
  }

  function check(schema, value, path, out) {
    if (!schema || typeof schema !== "object") return;
    const at = path || "(root)";
    if (schema.type) {
      const types = [].concat(schema.type);
      if (!types.some((t) => fits(t, value))) {
        out.push(at + ": must be " + types.join(" or ") + ", not " + typeOf(value));
        return;
      }
    }
    if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
      out.push(at + ": must be one of " + schema.enum.map((e) => JSON.stringify(e)).join(", "));
    }
    if (typeof value === "string") {
      const n = [...value].length;
      if (schema.minLength !== undefined && n < schema.minLength) out.push(at + ": needs at least " + schema.minLength + " characters");
      if (schema.maxLength !== undefined && n > schema.maxLength) out.push(at + ": allows at most " + schema.maxLength + " characters");
    }
    if (typeof value === "number") {
      if (schema.minimum !== undefined && value < schema.minimum) out.push(at + ": must be at least " + schema.minimum);
      if (schema.maximum !== undefined && value > schema.maximum) out.push(at + ": must be at most " + schema.maximum);
      if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) out.push(at + ": must be more than " + schema.exclusiveMinimum);
      if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) out.push(at + ": must be less than " + schema.exclusiveMaximum);
    }
    if (typeOf(value) === "object") {
      const props = schema.properties || {};
      (schema.required || []).forEach((k) => {
        if (!(k in value)) out.push(at + ": " + JSON.stringify(k) + " is required");
      });
      Object.keys(value).forEach((k) => {
        const sub = path ? `${path}/${k}` : k;
        if (k in props) check(props[k], value[k], sub, out);
        else if (schema.additionalProperties === false) out.push(at + ": " + JSON.stringify(k) + " is not allowed");
        else if (typeof schema.additionalProperties === "object") check(schema.additionalProperties, value[k], sub, out);
      });
    }
    if (Array.isArray(value) && schema.items) {
      value.forEach((item, i) => check(schema.items, item, path ? `${path}/${i}` : String(i), out));
    }
  }

  function errors(schema, value) {
    const out = [];
    check(schema, value, "", out);
    return out;
  }

  window.DeskSchema = { errors };
})();
