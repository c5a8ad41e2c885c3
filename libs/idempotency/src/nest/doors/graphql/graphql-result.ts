import type {
  FieldNode,
  GraphQLError as GraphQLErrorType,
  GraphQLField,
  GraphQLObjectType,
  GraphQLOutputType,
  GraphQLResolveInfo,
  SelectionSetNode,
} from 'graphql';
import { isDeepStrictEqual } from 'node:util';
import { graphqlModule } from './graphql-errors';
import { toPlain } from '../../plain-value';

/**
 * A mutation's result as its first caller was sent it, and the value that
 * makes GraphQL send the same again on a replay.
 *
 * The resolver's JavaScript value is not what the caller receives: GraphQL
 * resolves each selected field of it (getters included), picks the member
 * type of a union or interface, and serializes every scalar (a `Date` through
 * `DateTime`). So the capture walks the value the way GraphQL does, along the
 * mutation's selection set, and stores per object its concrete type
 * (`__typename`), the selected fields' values with each scalar in its
 * serialized form, and its own properties as plain JSON (what a field
 * resolver of the application reads from its parent). A replay rebuilds an
 * object of the same type from that: scalars read back through the scalar's
 * own `parseValue`, so GraphQL serializes them to the same output, and
 * `__typename` for Nest's default type resolution of unions and interfaces.
 *
 * A field whose value is an `Error` (reported by GraphQL as a field error)
 * is stored as that error, so a replay reports it again.
 */

/** Marks a stored GraphQL result (a plain value stored by an operator's resolution has none). */
const MARK = '$graphql';
const TYPENAME = '__typename';
const FIELDS = '#fields';
const SOURCE = '#source';
const ERROR = '#error';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

interface Walk {
  info: GraphQLResolveInfo;
  context: unknown;
  /** The value is a data view (`sanitize`'s answer): scalars are already serialized, types named by `__typename`. */
  serialized: boolean;
}

/**
 * The stored form of `value`, the result of the mutation `info` describes.
 * `sanitize`, when given, sees the result as data (each object's fields and
 * own properties, scalars serialized, `__typename`) and what it returns is
 * stored. Throws when the result cannot be replayed as it was sent.
 */
export async function captureResult(
  value: unknown,
  info: GraphQLResolveInfo,
  context: unknown,
  sanitize?: (data: unknown) => unknown,
): Promise<unknown> {
  const walk: Walk = { info, context, serialized: false };
  let data = await capture(value, info.returnType, info.fieldNodes, walk, '$');
  if (sanitize) {
    const view = sanitize(dataView(data));
    data = await capture(
      view,
      info.returnType,
      info.fieldNodes,
      { ...walk, serialized: true },
      '$',
    );
  }
  return { [MARK]: 1, data };
}

/**
 * A stored mutation result as another door replays it (an HTTP route or a
 * message handler sharing the scope): plain data, each object's own
 * properties and fields merged, scalars as they were sent. Any other value
 * is returned as it is.
 */
export function plainResult(stored: unknown): unknown {
  if (!isObject(stored) || stored[MARK] !== 1) return stored;
  return withoutTypenames(dataView(stored.data as Json));
}

function withoutTypenames(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutTypenames);
  if (!isObject(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(value))
    if (name !== TYPENAME) out[name] = withoutTypenames(field);
  return out;
}

/** A stored result as plain data: each object's own properties and fields merged, with `__typename`. */
function dataView(stored: Json): unknown {
  if (Array.isArray(stored)) return stored.map(dataView);
  if (!isObject(stored)) return stored;
  if (ERROR in stored) return stored;
  const out: Record<string, unknown> = isObject(stored[SOURCE]) ? { ...stored[SOURCE] } : {};
  for (const [name, value] of Object.entries((stored[FIELDS] ?? {}) as Record<string, Json>))
    out[name] = dataView(value);
  out[TYPENAME] = stored[TYPENAME];
  return out;
}

/** The value a replay returns to GraphQL, from what `captureResult` stored (or a plain value, as stored before 0.3 or by a resolution). */
export function replayResult(stored: unknown, info: GraphQLResolveInfo): unknown {
  if (!isObject(stored) || stored[MARK] !== 1) return stored;
  return revive(stored.data as Json, info.returnType, info);
}

async function capture(
  value: unknown,
  type: GraphQLOutputType,
  nodes: readonly FieldNode[],
  walk: Walk,
  path: string,
): Promise<Json> {
  const gql = graphqlModule();
  if (gql.isNonNullType(type)) return capture(value, type.ofType, nodes, walk, path);
  if (value === null || value === undefined) return null;
  if (value instanceof Error) return errorNode(value);
  if (walk.serialized && isObject(value) && isObject(value[ERROR])) return value as Json;
  if (gql.isListType(type)) {
    const items = Array.from(value as Iterable<unknown>);
    const out: Json[] = [];
    for (let i = 0; i < items.length; i++)
      out.push(await capture(items[i], type.ofType, nodes, walk, `${path}[${i}]`));
    return out;
  }
  if (gql.isLeafType(type)) return leaf(value, type, path, walk.serialized);
  let objectType: GraphQLObjectType;
  const named = walk.serialized
    ? walk.info.schema.getType(String((value as Json[] & Record<string, unknown>)[TYPENAME]))
    : undefined;
  if (named && gql.isObjectType(named)) {
    objectType = named;
  } else if (gql.isAbstractType(type)) {
    const resolved = await concreteType(value, type, walk);
    if (resolved instanceof Error) return errorNode(resolved);
    objectType = resolved;
  } else {
    objectType = type;
  }
  const fields: Record<string, Json> = {};
  const defs = objectType.getFields();
  for (const [name, fieldNodes] of collectFields(objectType, nodes, walk.info)) {
    const def = defs[name];
    if (def === undefined || !(name in (value as object))) continue;
    const fieldValue = (value as Record<string, unknown>)[name];
    if (typeof fieldValue === 'function') continue;
    fields[name] = await capture(fieldValue, def.type, fieldNodes, walk, `${path}.${name}`);
  }
  const source = JSON.parse(JSON.stringify(toPlain(value)) ?? 'null') as Json;
  if (walk.serialized && isObject(source)) {
    delete source[TYPENAME];
    for (const name of Object.keys(fields)) delete source[name];
  }
  return { [TYPENAME]: objectType.name, [FIELDS]: fields, [SOURCE]: source };
}

/** A scalar or enum value as GraphQL serializes it, checked to read back through `parseValue`. */
function leaf(
  value: unknown,
  type: { name: string; serialize(v: unknown): unknown; parseValue(v: unknown): unknown },
  path: string,
  alreadySerialized: boolean,
): Json {
  let serialized: unknown;
  try {
    serialized = alreadySerialized ? value : type.serialize(value);
  } catch (error) {
    // GraphQL reports this field as an error: so will a replay.
    return errorNode(error as Error);
  }
  if (serialized === undefined) {
    return errorNode(
      new Error(
        `Expected \`${type.name}.serialize(${String(value)})\` to return non-nullable value, returned: undefined`,
      ),
    );
  }
  let again: unknown;
  try {
    again = type.serialize(type.parseValue(serialized));
  } catch {
    again = undefined;
  }
  if (!isDeepStrictEqual(again, serialized)) {
    throw new Error(
      `the ${type.name} value at ${path} does not read back through ${type.name}.parseValue, so a replay could not send it as it was sent`,
    );
  }
  return serialized as Json;
}

async function concreteType(
  value: unknown,
  type: Parameters<GraphQLResolveInfo['schema']['getPossibleTypes']>[0],
  walk: Walk,
): Promise<GraphQLObjectType | Error> {
  const gql = graphqlModule();
  const resolveType = type.resolveType ?? gql.defaultTypeResolver;
  let name: unknown;
  try {
    name = await resolveType(value, walk.context, walk.info, type);
  } catch (error) {
    return error as Error;
  }
  const resolved = typeof name === 'string' ? walk.info.schema.getType(name) : undefined;
  if (resolved === undefined || !gql.isObjectType(resolved)) {
    return new Error(`Abstract type "${type.name}" must resolve to an Object type at runtime`);
  }
  return resolved;
}

/** The selected fields of an object type, by field name (aliases merged), as GraphQL collects them. */
function collectFields(
  type: GraphQLObjectType,
  nodes: readonly FieldNode[],
  info: GraphQLResolveInfo,
): Map<string, FieldNode[]> {
  const out = new Map<string, FieldNode[]>();
  const seen = new Set<string>();
  for (const node of nodes)
    if (node.selectionSet) collect(node.selectionSet, type, info, out, seen);
  return out;
}

function collect(
  selectionSet: SelectionSetNode,
  type: GraphQLObjectType,
  info: GraphQLResolveInfo,
  out: Map<string, FieldNode[]>,
  seen: Set<string>,
): void {
  const gql = graphqlModule();
  for (const selection of selectionSet.selections) {
    if (!included(selection, info)) continue;
    switch (selection.kind) {
      case gql.Kind.FIELD: {
        const name = selection.name.value;
        if (name === TYPENAME) continue;
        out.set(name, [...(out.get(name) ?? []), selection]);
        break;
      }
      case gql.Kind.INLINE_FRAGMENT:
        if (!selection.typeCondition || applies(selection.typeCondition.name.value, type, info))
          collect(selection.selectionSet, type, info, out, seen);
        break;
      case gql.Kind.FRAGMENT_SPREAD: {
        const name = selection.name.value;
        const fragment = info.fragments[name];
        if (seen.has(name) || !fragment) break;
        seen.add(name);
        if (applies(fragment.typeCondition.name.value, type, info))
          collect(fragment.selectionSet, type, info, out, seen);
        break;
      }
    }
  }
}

function included(
  node: Parameters<typeof import('graphql').getDirectiveValues>[1],
  info: GraphQLResolveInfo,
): boolean {
  const gql = graphqlModule();
  const skip = gql.getDirectiveValues(gql.GraphQLSkipDirective, node, info.variableValues);
  if (skip?.if === true) return false;
  const include = gql.getDirectiveValues(gql.GraphQLIncludeDirective, node, info.variableValues);
  return include?.if !== false;
}

function applies(condition: string, type: GraphQLObjectType, info: GraphQLResolveInfo): boolean {
  if (condition === type.name) return true;
  const gql = graphqlModule();
  const named = info.schema.getType(condition);
  return named !== undefined && gql.isAbstractType(named) && info.schema.isSubType(named, type);
}

function errorNode(error: Error): Json {
  const extensions = (error as Partial<GraphQLErrorType>).extensions;
  return {
    [ERROR]: {
      message: error.message,
      ...(extensions && Object.keys(extensions).length > 0
        ? { extensions: JSON.parse(JSON.stringify(extensions)) as Json }
        : {}),
    },
  };
}

function revive(stored: Json, type: GraphQLOutputType, info: GraphQLResolveInfo): unknown {
  const gql = graphqlModule();
  if (gql.isNonNullType(type)) return revive(stored, type.ofType, info);
  if (stored === null) return null;
  if (isObject(stored) && isObject(stored[ERROR])) {
    const { message, extensions } = stored[ERROR] as {
      message: string;
      extensions?: Record<string, unknown>;
    };
    return new gql.GraphQLError(message, { extensions });
  }
  if (gql.isListType(type))
    return (stored as Json[]).map((item) => revive(item, type.ofType, info));
  if (gql.isLeafType(type)) return type.parseValue(stored);
  if (!isObject(stored)) return stored;
  const named = info.schema.getType(String(stored[TYPENAME]));
  const objectType =
    named && gql.isObjectType(named) ? named : gql.isObjectType(type) ? type : undefined;
  const out: Record<string, unknown> = isObject(stored[SOURCE])
    ? { ...(stored[SOURCE] as object) }
    : {};
  const fields = isObject(stored[FIELDS]) ? (stored[FIELDS] as Record<string, Json>) : {};
  const defs: Record<string, GraphQLField<unknown, unknown>> = objectType?.getFields() ?? {};
  for (const [name, value] of Object.entries(fields)) {
    const def = defs[name];
    out[name] = def ? revive(value, def.type, info) : value;
  }
  // Nest resolves a union or interface by class, else by `__typename`.
  Object.defineProperty(out, TYPENAME, { value: stored[TYPENAME], enumerable: false });
  return out;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
