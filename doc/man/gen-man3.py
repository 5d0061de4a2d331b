#!/usr/bin/env python3
"""gen-man3.py - one man page per public function, from Doxygen's XML.

    gen-man3.py --xml DIR --out DIR --version V [--srcdir DIR]

DIR is Doxygen's XML output for include/mrmgr/*.h (the Makefile runs
Doxygen with doc/Doxyfile and GENERATE_XML). Every function declared in
a public header gets NAME (its brief: the first sentence), SYNOPSIS (the
header, the prototype, the link line), DESCRIPTION, PARAMETERS, RETURN
VALUE, the structures its parameters point to (fields and their
comments) and SEE ALSO (the functions its text names, and mrmgr(3)).
Nothing is listed by hand: a function added to or removed from a header
gets or loses its page at the next build.

The pages' date is SOURCE_DATE_EPOCH's when set (reproducible builds),
else the newest header's modification time.
"""
import argparse
import os
import re
import sys
import time
import xml.etree.ElementTree as ET

# What a header's functions link with. The simulator has a library and a
# pkg-config name of its own, and so has the sharing helper (share.h).
PKG_OF_HEADER = {'mrmgr.h': 'mrmgr', 'sim.h': 'mrmgr-sim', 'share.h': 'mrmgr-share'}


def esc(text, code=True):
    """Escape text for roff: backslashes; in code, dashes stay minus signs
    (prose keeps its hyphens)."""
    text = text.replace('\\', '\\e')
    return text.replace('-', '\\-') if code else text


class Roff:
    """Inline text is gathered into a line; requests go on lines of their own."""

    def __init__(self):
        self.lines = []
        self.cur = ''

    def text(self, s):
        s = re.sub(r'\s+', ' ', s)
        if not self.cur:
            s = s.lstrip()
        self.cur += s

    def raw(self, s):
        self.cur += s

    def flush(self):
        line = self.cur.replace('\\fB\\%\\fP', '').replace('\\fB\\fP', '').replace('\\fI\\fP', '').strip()
        self.cur = ''
        if line:
            # A text line must not start with a control character.
            if line[0] in ".'":
                line = '\\&' + line
            self.lines.append(line)

    def req(self, r):
        self.flush()
        self.lines.append(r)


class Page:
    def __init__(self, funcs, structs):
        self.funcs = funcs        # names of every documented function
        self.structs = structs    # struct name -> compounddef
        self.seealso = set()
        self.used_structs = []

    def inline(self, el, out, font=None):
        """Render an element's text and children inline."""
        code = font == 'B'
        if el.text:
            out.text(esc(el.text, code))
        for ch in el:
            self.node(ch, out, font)
            if ch.tail:
                out.text(esc(ch.tail, code))

    def node(self, el, out, font):
        tag = el.tag
        if tag == 'computeroutput':
            out.raw('\\fB\\%')
            self.inline(el, out, 'B')
            out.raw('\\fP')
        elif tag in ('emphasis',):
            out.raw('\\fI')
            self.inline(el, out, 'I')
            out.raw('\\fP')
        elif tag == 'bold':
            out.raw('\\fB')
            self.inline(el, out, 'B')
            out.raw('\\fP')
        elif tag == 'ref':
            name = ''.join(el.itertext())
            base = name.rstrip('()').strip()
            if base in self.funcs:
                self.seealso.add(base)
            if font:
                self.inline(el, out, font)
            else:
                out.raw('\\fB\\%')
                self.inline(el, out, 'B')
                out.raw('\\fP')
        elif tag == 'sp':
            out.raw(' ')
        elif tag == 'linebreak':
            out.req('.br')
        elif tag == 'ulink':
            self.inline(el, out, font)
        elif tag == 'anchor':
            pass
        elif tag == 'para':
            # A paragraph nested in inline context (list items).
            self.para(el, out)
        elif tag in ('itemizedlist', 'orderedlist'):
            self.list(el, out)
        elif tag in ('parameterlist', 'simplesect'):
            pass  # sections of their own, rendered by the caller
        elif tag == 'programlisting':
            out.req('.PP')
            out.req('.nf')
            for line in el.iter('codeline'):
                out.raw(esc(''.join(line.itertext())))
                out.flush()
            out.req('.fi')
        else:
            self.inline(el, out, font)

    def list(self, el, out):
        n = 0
        for item in el.findall('listitem'):
            n += 1
            mark = '\\(bu' if el.tag == 'itemizedlist' else '%d.' % n
            out.req('.IP %s 4' % mark)
            first = True
            for p in item.findall('para'):
                if not first:
                    out.req('.IP "" 4')
                first = False
                self.para(p, out, in_list=True)
        out.req('.PP')

    def para(self, p, out, in_list=False):
        """A Doxygen <para>: inline content; lists and @par break it up."""
        if p.text:
            out.text(esc(p.text, False))
        for ch in p:
            if ch.tag == 'simplesect' and ch.get('kind') == 'par':
                out.flush()
                title = ch.find('title')
                out.req('.SS "%s"' % esc(''.join(title.itertext()).strip())
                        if title is not None else '.PP')
                for q in ch.findall('para'):
                    self.para(q, out)
                    out.req('.PP')
            elif ch.tag in ('simplesect', 'parameterlist'):
                pass
            else:
                self.node(ch, out, None)
            if ch.tail:
                out.text(esc(ch.tail, False))
        out.flush()

    def blocks(self, desc, out):
        """Top-level paragraphs of a description, one .PP each."""
        if desc is None:
            return
        first = True
        for p in desc.findall('para'):
            before = len(out.lines)
            if not first:
                out.req('.PP')
            self.para(p, out)
            if len(out.lines) == before + (0 if first else 1):
                # Nothing but sections in it: drop the empty .PP.
                if not first:
                    out.lines.pop()
            else:
                first = False


def text_of(el):
    return re.sub(r'\s+', ' ', ''.join(el.itertext())).strip() if el is not None else ''


def first_sentence(desc):
    """NAME line: the brief, else the first sentence of the description."""
    paras = desc.findall('para') if desc is not None else []
    if not paras:
        return ''
    p = paras[0]
    # Text before any parameter list or section.
    parts = [p.text or '']
    for ch in p:
        if ch.tag in ('parameterlist', 'simplesect', 'itemizedlist'):
            break
        parts.append(''.join(ch.itertext()))
        parts.append(ch.tail or '')
    s = re.sub(r'\s+', ' ', ''.join(parts)).strip()
    # A sentence ends at ';', ':' or '.' before a space or the end, except
    # after "e.g", "i.e" and "etc".
    m = re.match(r'(.+?(?:[;:]|(?<!e\.g)(?<!i\.e)(?<!etc)\.)(?=\s|$))', s)
    s = m.group(1) if m else s
    s = s.rstrip('.;:')
    return s[:1].lower() + s[1:] if s[:2] != s[:2].upper() else s


def synopsis_line(md):
    ret = text_of(md.find('type'))
    name = md.findtext('name')
    params = md.findall('param')
    pieces = []
    for prm in params:
        t = text_of(prm.find('type'))
        n = prm.findtext('declname') or ''
        pieces.append((t, n))
    if len(pieces) == 1 and pieces[0] == ('void', ''):
        pieces = []
    sep = '' if ret.endswith('*') else ' '
    head = '%s%s%s(' % (ret, sep, name)
    if not pieces:
        return ['.BI "%s" void );' % esc(head)]
    out = []
    for i, (t, n) in enumerate(pieces):
        tail = ');' if i == len(pieces) - 1 else ','
        tsep = '' if t.endswith('*') else ' '
        prefix = head if i == 0 else '    '
        if n:
            out.append('.BI "%s%s%s" %s %s' % (esc(prefix), esc(t), tsep, esc(n), tail))
        else:
            out.append('.B "%s%s%s"' % (esc(prefix), esc(t), tail))
    return out


def struct_names_of(md):
    """Structures a function's parameters point to (documented ones)."""
    names = []
    for prm in md.findall('param'):
        for ref in prm.find('type').iter('ref'):
            if ref.get('kindref') == 'compound' and ref.get('refid', '').startswith('struct'):
                names.append(ref.text)
    return names


def struct_block(cd, out):
    name = cd.findtext('compoundname')
    out.req('.PP')
    out.req('.in +4n')
    out.req('.EX')
    out.lines.append('struct %s {' % esc(name))
    for md in cd.iter('memberdef'):
        if md.get('kind') != 'variable':
            continue
        t = text_of(md.find('type'))
        n = md.findtext('name')
        args = md.findtext('argsstring') or ''
        brief = text_of(md.find('briefdescription')) or \
            first_sentence(md.find('detaileddescription'))
        decl = '%s%s%s%s;' % (t, '' if t.endswith('*') else ' ', n, args)
        line = '    %-28s' % decl
        if brief:
            line += ' /* %s */' % brief
        out.lines.append(esc(line.rstrip()))
    out.lines.append('};')
    out.req('.EE')
    out.req('.in')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--xml', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--version', required=True)
    ap.add_argument('--srcdir', default='.')
    a = ap.parse_args()

    sim_split = os.path.exists(os.path.join(a.srcdir, 'mrmgr-sim.pc.in'))
    index = ET.parse(os.path.join(a.xml, 'index.xml')).getroot()
    files, structs = [], {}
    for comp in index.findall('compound'):
        path = os.path.join(a.xml, comp.get('refid') + '.xml')
        if comp.get('kind') == 'file' and comp.findtext('name').endswith('.h'):
            files.append(ET.parse(path).getroot().find('compounddef'))
        elif comp.get('kind') == 'struct':
            cd = ET.parse(path).getroot().find('compounddef')
            structs[cd.findtext('compoundname')] = cd

    funcs = {}
    for fd in files:
        header = fd.findtext('compoundname')
        for md in fd.iter('memberdef'):
            if md.get('kind') == 'function':
                funcs[md.findtext('name')] = (header, md)
    if not funcs:
        sys.exit('gen-man3: no functions in %s' % a.xml)

    epoch = os.environ.get('SOURCE_DATE_EPOCH')
    if epoch is None:
        epoch = max(os.path.getmtime(fd.find('location').get('file'))
                    for fd in files if fd.find('location') is not None)
    date = time.strftime('%Y-%m-%d', time.gmtime(int(float(epoch))))

    os.makedirs(a.out, exist_ok=True)
    for name, (header, md) in sorted(funcs.items()):
        pg = Page(funcs, structs)
        out = Roff()
        desc = md.find('detaileddescription')
        brief = text_of(md.find('briefdescription')) or first_sentence(desc)
        if not brief:
            sys.exit('gen-man3: %s has no documentation' % name)
        out.lines.append('.\\" Generated from include/mrmgr/%s by doc/man/gen-man3.py.' % header)
        out.lines.append('.\\" Do not edit: edit the header\'s comment.')
        out.lines.append('.TH %s 3 %s "libmrmgr %s" "libmrmgr"'
                         % (name.upper(), date, esc(a.version)))
        out.req('.SH NAME')
        out.lines.append('%s \\- %s' % (esc(name), esc(brief, False)))
        out.req('.SH SYNOPSIS')
        out.req('.nf')
        out.lines.append('.B #include <mrmgr/%s>' % header)
        out.lines.append('.PP')
        out.lines.extend(synopsis_line(md))
        out.req('.fi')
        pkg = PKG_OF_HEADER.get(header, 'mrmgr')
        if pkg == 'mrmgr-sim' and not sim_split:
            pkg = 'mrmgr'
        out.req('.PP')
        out.text('Compile and link with \\fI$(pkg\\-config \\-\\-cflags \\-\\-libs %s)\\fP.'
                 % esc(pkg))
        out.flush()

        out.req('.SH DESCRIPTION')
        pg.blocks(md.find('briefdescription'), out)
        pg.blocks(desc, out)

        plist = [pl for pl in desc.iter('parameterlist') if pl.get('kind') == 'param']
        if plist:
            out.req('.SH PARAMETERS')
            for pl in plist:
                for item in pl.findall('parameteritem'):
                    pnames = ', '.join(text_of(n) for n in item.iter('parametername'))
                    out.req('.TP')
                    out.lines.append('.I %s' % esc(pnames))
                    for p in item.find('parameterdescription').findall('para'):
                        pg.para(p, out)
        rets = [s for s in desc.iter('simplesect') if s.get('kind') == 'return']
        if rets:
            out.req('.SH RETURN VALUE')
            for s in rets:
                for p in s.findall('para'):
                    pg.para(p, out)
        seen = set()
        snames = [s for s in struct_names_of(md) if s in structs and not (s in seen or seen.add(s))]
        if snames:
            out.req('.SH STRUCTURES')
            for s in snames:
                struct_block(structs[s], out)
        notes = [s for s in desc.iter('simplesect') if s.get('kind') in ('note', 'warning', 'see')]
        for s in notes:
            if s.get('kind') != 'see':
                out.req('.SH NOTES')
            for p in s.findall('para'):
                pg.para(p, out)
        out.flush()

        pg.seealso.discard(name)
        refs = ['.BR \\%%%s (3' % esc(f) for f in sorted(pg.seealso)]
        refs.append('.BR mrmgr (3')
        if header == 'mrmgr.h':
            refs.append('.BR mrmgr\\-env (7')
        out.req('.SH SEE ALSO')
        for i, r in enumerate(refs):
            out.lines.append(r + (')' if i == len(refs) - 1 else '),'))

        # Collapse requests that would only add blank space.
        lines, prev = [], None
        for line in out.lines:
            if line == '.PP' and (prev is None or prev.startswith(('.SH', '.SS', '.PP', '.TP', '.IP'))):
                continue
            if prev == '.PP' and line.startswith(('.SH', '.SS', '.IP', '.TP')):
                lines.pop()
            lines.append(line)
            prev = line
        if lines and lines[-1] == '.PP':
            lines.pop()
        with open(os.path.join(a.out, name + '.3'), 'w') as f:
            f.write('\n'.join(lines) + '\n')
    print('gen-man3: %d pages in %s' % (len(funcs), a.out))


if __name__ == '__main__':
    main()
