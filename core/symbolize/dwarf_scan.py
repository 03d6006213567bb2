"""A raw scanner of ``.debug_info`` that finds a compile unit's function definitions
without parsing every DIE: skipping a DIE by its abbreviation is ~10x cheaper than
pyelftools parsing it, and most of a unit's top-level DIEs (types, declarations from
headers) are only skipped on the way to its function definitions.  Anything it does
not handle raises `SlowPath`; the caller then walks the unit with pyelftools."""

from __future__ import annotations


class SlowPath(Exception):
    """The raw DIE scanner met something it does not handle; use pyelftools."""


_FIXED_FORM_SIZES = {
    "DW_FORM_flag_present": 0, "DW_FORM_implicit_const": 0,
    "DW_FORM_data1": 1, "DW_FORM_ref1": 1, "DW_FORM_flag": 1, "DW_FORM_strx1": 1,
    "DW_FORM_addrx1": 1,
    "DW_FORM_data2": 2, "DW_FORM_ref2": 2, "DW_FORM_strx2": 2, "DW_FORM_addrx2": 2,
    "DW_FORM_strx3": 3, "DW_FORM_addrx3": 3,
    "DW_FORM_data4": 4, "DW_FORM_ref4": 4, "DW_FORM_strx4": 4, "DW_FORM_addrx4": 4,
    "DW_FORM_ref_sup4": 4,
    "DW_FORM_data8": 8, "DW_FORM_ref8": 8, "DW_FORM_ref_sig8": 8, "DW_FORM_ref_sup8": 8,
    "DW_FORM_data16": 16,
}
_OFFSET_SIZE_FORMS = frozenset({"DW_FORM_strp", "DW_FORM_line_strp", "DW_FORM_sec_offset",
                                "DW_FORM_strp_sup", "DW_FORM_GNU_ref_alt",
                                "DW_FORM_GNU_strp_alt"})
_LEB_FORMS = frozenset({"DW_FORM_udata", "DW_FORM_sdata", "DW_FORM_ref_udata", "DW_FORM_strx",
                        "DW_FORM_addrx", "DW_FORM_rnglistx", "DW_FORM_loclistx",
                        "DW_FORM_GNU_addr_index", "DW_FORM_GNU_str_index"})
_BLOCK_LENGTH_SIZES = {"DW_FORM_block1": 1, "DW_FORM_block2": 2, "DW_FORM_block4": 4}
# ops of a skip plan
_OP_FIXED, _OP_LEB, _OP_CSTR, _OP_BLOCK, _OP_BLOCK_LEB, _OP_SIB_REL, _OP_SIB_REL_LEB, \
    _OP_SIB_ABS = range(8)


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 at pos: (value, the position after it)."""
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


class RawUnit:
    """Skip plans for one unit's abbreviations, over the raw .debug_info bytes."""

    def __init__(self, cu, data: bytes):
        self.cu = cu
        self.data = data
        self.end = cu.cu_offset + cu.size
        self.little = cu.structs.little_endian
        self.offset_size = 8 if cu.structs.dwarf_format == 64 else 4
        self.address_size = cu["address_size"]
        self.version = cu["version"]
        self._abbrevs = cu.get_abbrev_table()
        self._plans: dict[int, tuple] = {}

    def plan(self, code: int) -> tuple:
        plan = self._plans.get(code)
        if plan is None:
            plan = self._plans[code] = self._make_plan(code)
        return plan

    def _make_plan(self, code: int) -> tuple:
        decl = self._abbrevs.get_abbrev(code)
        ops: list[tuple[int, int]] = []
        has_code = False
        for name, form in decl.iter_attr_specs():
            if name in ("DW_AT_low_pc", "DW_AT_ranges"):
                has_code = True
            if name == "DW_AT_sibling":
                if form == "DW_FORM_ref_udata":
                    ops.append((_OP_SIB_REL_LEB, 0))
                elif form in ("DW_FORM_ref1", "DW_FORM_ref2", "DW_FORM_ref4", "DW_FORM_ref8"):
                    ops.append((_OP_SIB_REL, _FIXED_FORM_SIZES[form]))
                elif form == "DW_FORM_ref_addr":
                    ops.append((_OP_SIB_ABS, self._ref_addr_size()))
                else:
                    raise SlowPath(f"sibling in {form}")
                continue
            size = _FIXED_FORM_SIZES.get(form)
            if size is None:
                if form in _OFFSET_SIZE_FORMS:
                    size = self.offset_size
                elif form == "DW_FORM_addr":
                    size = self.address_size
                elif form == "DW_FORM_ref_addr":
                    size = self._ref_addr_size()
            if size is not None:
                if size:
                    if ops and ops[-1][0] == _OP_FIXED:
                        ops[-1] = (_OP_FIXED, ops[-1][1] + size)
                    else:
                        ops.append((_OP_FIXED, size))
            elif form in _LEB_FORMS:
                ops.append((_OP_LEB, 0))
            elif form == "DW_FORM_string":
                ops.append((_OP_CSTR, 0))
            elif form in _BLOCK_LENGTH_SIZES:
                ops.append((_OP_BLOCK, _BLOCK_LENGTH_SIZES[form]))
            elif form in ("DW_FORM_block", "DW_FORM_exprloc"):
                ops.append((_OP_BLOCK_LEB, 0))
            else:  # DW_FORM_indirect and anything unforeseen
                raise SlowPath(f"attribute form {form}")
        return decl["tag"], decl.has_children(), has_code, tuple(ops)

    def _ref_addr_size(self) -> int:
        return self.address_size if self.version <= 2 else self.offset_size

    def skip_attributes(self, pos: int, ops: tuple) -> tuple[int, int | None]:
        """Position after a DIE's attributes, and its DW_AT_sibling target (absolute)."""
        data = self.data
        sibling = None
        for op, n in ops:
            if op == _OP_FIXED:
                pos += n
            elif op == _OP_LEB:
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            elif op == _OP_CSTR:
                pos = data.index(0, pos) + 1
            elif op == _OP_BLOCK:
                pos += n + int.from_bytes(data[pos:pos + n], "little" if self.little else "big")
            elif op == _OP_BLOCK_LEB:
                length, pos = _uleb(data, pos)
                pos += length
            elif op == _OP_SIB_REL_LEB:
                value, pos = _uleb(data, pos)
                sibling = self.cu.cu_offset + value
            else:
                value = int.from_bytes(data[pos:pos + n], "little" if self.little else "big")
                pos += n
                sibling = value if op == _OP_SIB_ABS else self.cu.cu_offset + value
        return pos, sibling

    def definitions(self, pos: int, descend: frozenset | None, out: list) -> int:
        """Appends the offsets of function definitions (DW_TAG_subprogram DIEs whose
        abbreviation has DW_AT_low_pc or DW_AT_ranges) among the DIEs from pos to the
        end of their sibling list, looking inside the children of DIEs whose tag is in
        descend (None: of every DIE); returns the position after that list."""
        data, end = self.data, self.end
        while pos < end:
            start = pos
            code, pos = _uleb(data, pos)
            if code == 0:
                return pos
            tag, has_children, has_code, ops = self.plan(code)
            pos, sibling = self.skip_attributes(pos, ops)
            if has_code and tag == "DW_TAG_subprogram":
                out.append(start)
            if has_children:
                if descend is None or tag in descend:
                    pos = self.definitions(pos, descend, out)
                elif sibling is not None and pos <= sibling <= end:
                    pos = sibling
                else:
                    pos = self.definitions(pos, frozenset(), [])  # skip the subtree
        return pos
