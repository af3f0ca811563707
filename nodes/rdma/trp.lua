-- Wireshark/tshark dissector for TRP, the 10-byte reliability header that rdma-graph (and urdma)
-- put in front of iWARP DDP/RDMAP in every UDP datagram. The wire format is in nodes/rdma/PROTOCOL.md:
--
--   psn(4) ack_psn(4) opcode(2: high 4 bits = TRP opcode, low 12 bits: the CE echo in DATA and
--   SACK, reserved in the others) [body]
--
-- Opcode 0 with a body is a DDP segment, handed to Wireshark's own iwarp_ddp_rdmap dissector;
-- opcode 0 without one is a pure ACK. REQ/ACCEPT/REJECT carry connection parameters and private
-- data; FIN and SACK have no body.
--
-- tshark:
--   tshark -X lua_script:nodes/rdma/trp.lua -d udp.port==49200,urdma_trp \
--     -o iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE \
--     --disable-protocol rpcordma --disable-protocol smb_direct -r capture.pcap
--   49200 stands for a QP's UDP port (the API's qpn): one -d per port, since every QP and
--   listener has its own. Add -V for the full tree, or filter, e.g. -Y 'trp.opcode == 5' (SACKs).
--
-- Wireshark GUI: copy this file into the personal Lua plugins folder (Help > About Wireshark >
-- Folders, "Personal Lua Plugins"; on Linux ~/.local/lib/wireshark/plugins/) or start
-- `wireshark -X lua_script:trp.lua`. Then Analyze > Decode As..., field "UDP port", value the
-- QP port, Current "URDMA_TRP". Recommended, as for tshark: Edit > Preferences > Protocols >
-- IWARP_DDP_RDMAP, untick send reassembly (it keys on arrival order, not on MO), and in
-- Analyze > Enabled Protocols untick RPCoRDMA and SMB_Direct (heuristics that try to parse every
-- Send payload and call it malformed).
--
-- Opcodes 7 PROBE and 8 PROBE_ACK (rdma-graph's) are a retransmission timeout's question and its
-- answer: the header alone, like a pure ACK. Opcodes 9 SIDR_REQ and 10 SIDR_REP are the datagram
-- service's request and answer (rdma_cm's UD port space): trp.sidr.request_id, trp.sidr.qkey,
-- trp.sidr.status, trp.sidr.qpn, with the CM fields' layout.
--
-- Fields: trp.psn, trp.ack, trp.opcode, trp.reserved, trp.ce_echo (DATA, SACK, PROBE, PROBE_ACK: the count of
-- CE-marked data packets the sender of this packet received, mod 4096: PROTOCOL.md section 5),
-- trp.sack (SACK range text),
-- trp.pure_ack, trp.cm.pdlen, trp.cm.ird, trp.cm.ord, trp.cm.private_data, trp.cm.reject_reason
-- (a REJECT's reason, in the place of IRD: PROTOCOL.md section 6), trp.send_imm (the
-- immediate of rdma-graph's Send with Immediate, RDMAP opcodes 12 and 13, which Wireshark's
-- iWARP dissector shows as Unknown: PROTOCOL.md section 4); for a UD datagram (opcode 6, section
-- 9) trp.dg.qkey, trp.dg.imm, trp.dg.flags (.imm, .solicited) and trp.dg.data instead of PSN/ACK.

local trp = Proto("urdma_trp", "urdma TRP over UDP")

local OP_DATA, OP_REQ, OP_ACCEPT, OP_REJECT, OP_FIN, OP_SACK, OP_DATAGRAM = 0, 1, 2, 3, 4, 5, 6
local OP_PROBE, OP_PROBE_ACK, OP_SIDR_REQ, OP_SIDR_REP = 7, 8, 9, 10
local op_names = {
    [OP_DATA] = "DATA/ACK", [OP_REQ] = "REQ", [OP_ACCEPT] = "ACCEPT",
    [OP_REJECT] = "REJECT", [OP_FIN] = "FIN", [OP_SACK] = "SACK", [OP_DATAGRAM] = "DATAGRAM",
    [OP_PROBE] = "PROBE", [OP_PROBE_ACK] = "PROBE_ACK",
    [OP_SIDR_REQ] = "SIDR_REQ", [OP_SIDR_REP] = "SIDR_REP",
}

local f = {
    psn = ProtoField.uint32("trp.psn", "PSN", base.DEC),
    ack = ProtoField.uint32("trp.ack", "ACK PSN", base.DEC),
    opcode = ProtoField.uint16("trp.opcode", "Opcode", base.DEC, op_names, 0xF000),
    reserved = ProtoField.uint16("trp.reserved", "Reserved", base.HEX, nil, 0x0FFF),
    ce_echo = ProtoField.uint16("trp.ce_echo", "CE echo (CE-marked data packets received, mod 4096)", base.DEC, nil, 0x0FFF),
    sack = ProtoField.string("trp.sack", "SACK range"),
    pure_ack = ProtoField.bool("trp.pure_ack", "Pure ACK"),
    pdlen = ProtoField.uint16("trp.cm.pdlen", "Private data length", base.DEC),
    ird = ProtoField.uint16("trp.cm.ird", "IRD", base.DEC),
    ord = ProtoField.uint16("trp.cm.ord", "ORD", base.DEC),
    reject_reason = ProtoField.uint16("trp.cm.reject_reason", "Reject reason", base.DEC, {
        [0] = "refused by the listener", [1] = "no listener on the port",
        [2] = "listener's backlog full", [3] = "IRD/ORD out of range",
    }),
    private_data = ProtoField.bytes("trp.cm.private_data", "Private data"),
    send_imm = ProtoField.uint32("trp.send_imm", "Send with Immediate (rdma-graph): immediate", base.HEX),
    dg_qkey = ProtoField.uint32("trp.dg.qkey", "Q_Key", base.HEX),
    dg_imm = ProtoField.uint32("trp.dg.imm", "Immediate data", base.HEX),
    dg_flags = ProtoField.uint16("trp.dg.flags", "Datagram flags", base.HEX, nil, 0x0FFF),
    dg_flag_imm = ProtoField.bool("trp.dg.flags.imm", "Immediate present", 12, nil, 0x001),
    dg_flag_se = ProtoField.bool("trp.dg.flags.solicited", "Solicited event", 12, nil, 0x002),
    dg_data = ProtoField.bytes("trp.dg.data", "Message"),
    sidr_id = ProtoField.uint32("trp.sidr.request_id", "Request id", base.HEX),
    sidr_qkey = ProtoField.uint32("trp.sidr.qkey", "Q_Key", base.HEX),
    sidr_status = ProtoField.uint16("trp.sidr.status", "Status", base.DEC, {
        [0] = "success", [1] = "no datagram listener on the port", [2] = "rejected",
    }),
    sidr_qpn = ProtoField.uint16("trp.sidr.qpn", "Serving QP", base.DEC),
}
trp.fields = f

local e = {
    short = ProtoExpert.new("trp.short", "Shorter than its header",
        expert.group.MALFORMED, expert.severity.ERROR),
    cm_length = ProtoExpert.new("trp.cm.bad_length", "Datagram length is not 16 + private data length",
        expert.group.MALFORMED, expert.severity.ERROR),
    cm_too_long = ProtoExpert.new("trp.cm.too_long", "Private data longer than 512 bytes",
        expert.group.PROTOCOL, expert.severity.WARN),
    reserved = ProtoExpert.new("trp.reserved.nonzero", "Reserved opcode bits are not 0",
        expert.group.PROTOCOL, expert.severity.WARN),
    trailing = ProtoExpert.new("trp.trailing", "Bytes after a header that has no body",
        expert.group.MALFORMED, expert.severity.WARN),
    unknown = ProtoExpert.new("trp.unknown_opcode", "Unknown TRP opcode",
        expert.group.UNDECODED, expert.severity.WARN),
    dg_reserved = ProtoExpert.new("trp.dg.reserved", "Reserved datagram flag bits are not 0",
        expert.group.PROTOCOL, expert.severity.WARN),
}
trp.experts = e

local ddp = Dissector.get("iwarp_ddp_rdmap")

-- The CM layout after the header: private-data-length(2), two 2-byte fields (`a`, `b`), the
-- private data. Returns the private-data length, or nil when the datagram is too short.
local function cm_body(tvb, t, len, a, b)
    if len < 16 then
        t:add_proto_expert_info(e.short)
        return nil
    end
    local pdlen = tvb(10, 2):uint()
    local pl = t:add(f.pdlen, tvb(10, 2))
    t:add(a, tvb(12, 2))
    t:add(b, tvb(14, 2))
    if len > 16 then t:add(f.private_data, tvb(16)) end
    if len ~= 16 + pdlen then pl:add_proto_expert_info(e.cm_length) end
    if pdlen > 512 then pl:add_proto_expert_info(e.cm_too_long) end
    return pdlen
end

function trp.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    pinfo.cols.protocol = "TRP"
    local t = tree:add(trp, tvb())
    if len < 10 then
        pinfo.cols.info = "TRP, shorter than its header"
        t:add_proto_expert_info(e.short)
        return len
    end
    local psn, ack = tvb(0, 4):uint(), tvb(4, 4):uint()
    -- Plain arithmetic, no bit operators: works on Lua 5.2 (Wireshark 4.0) and 5.4.
    local op = math.floor(tvb(8, 2):uint() / 4096)
    if op == OP_DATAGRAM then
        -- A UD QP's datagram (PROTOCOL.md section 9): Q_Key, immediate, flags, the message.
        local fl = tvb(8, 2):uint() % 4096
        t:add(f.dg_qkey, tvb(0, 4))
        t:add(f.dg_imm, tvb(4, 4))
        t:add(f.opcode, tvb(8, 2))
        local ft = t:add(f.dg_flags, tvb(8, 2))
        ft:add(f.dg_flag_imm, tvb(8, 2))
        ft:add(f.dg_flag_se, tvb(8, 2))
        if fl >= 4 then ft:add_proto_expert_info(e.dg_reserved) end
        if len > 10 then t:add(f.dg_data, tvb(10)) end
        local imm = fl % 2 == 1 and string.format(" IMM=0x%08x", ack) or ""
        t:append_text(string.format(", DATAGRAM, Q_Key 0x%08x, %u bytes", psn, len - 10))
        pinfo.cols.info = string.format("DATAGRAM Q_Key=0x%08x%s%s %u bytes", psn, imm,
            math.floor(fl / 2) % 2 == 1 and " SE" or "", len - 10)
        return len
    end
    if op == OP_SIDR_REQ or op == OP_SIDR_REP then
        -- The datagram service's request and answer (PROTOCOL.md section 6.1): the CM layout,
        -- the request id where the PSN is (REQ) or echoed where the ACK is (REP, with the Q_Key
        -- in the PSN's place), the status and serving QP where IRD and ORD are.
        local rep = op == OP_SIDR_REP
        if rep then
            t:add(f.sidr_qkey, tvb(0, 4))
            t:add(f.sidr_id, tvb(4, 4))
        else
            t:add(f.sidr_id, tvb(0, 4))
            t:add(f.ack, tvb(4, 4))
        end
        t:add(f.opcode, tvb(8, 2))
        local r = t:add(f.reserved, tvb(8, 2))
        if tvb(8, 2):uint() % 4096 ~= 0 then r:add_proto_expert_info(e.reserved) end
        local pdlen = cm_body(tvb, t, len, rep and f.sidr_status or f.ird, rep and f.sidr_qpn or f.ord)
        if pdlen == nil then return len end
        if rep then
            t:append_text(string.format(", SIDR_REP, status %u", tvb(12, 2):uint()))
            pinfo.cols.info = string.format("SIDR_REP id=0x%08x status %u QP=%u Q_Key=0x%08x private data %u bytes",
                ack, tvb(12, 2):uint(), tvb(14, 2):uint(), psn, pdlen)
        else
            t:append_text(", SIDR_REQ")
            pinfo.cols.info = string.format("SIDR_REQ id=0x%08x private data %u bytes", psn, pdlen)
        end
        return len
    end
    t:add(f.psn, tvb(0, 4))
    t:add(f.ack, tvb(4, 4))
    t:add(f.opcode, tvb(8, 2))
    if op == OP_DATA or op == OP_SACK or op == OP_PROBE or op == OP_PROBE_ACK then
        t:add(f.ce_echo, tvb(8, 2))
    else
        local r = t:add(f.reserved, tvb(8, 2))
        if tvb(8, 2):uint() % 4096 ~= 0 then r:add_proto_expert_info(e.reserved) end
    end
    local name = op_names[op] or ("Unknown " .. op)
    t:append_text(string.format(", %s, PSN %u, ACK %u", name, psn, ack))
    pinfo.cols.info = string.format("%s PSN=%u ACK=%u", name, psn, ack)

    if op == OP_DATA and len > 10 then
        -- A DDP segment: Wireshark's iWARP dissector sets the protocol and info columns. If it
        -- finds the segment malformed, Wireshark has marked the packet already; pcall keeps
        -- that from also showing as a Lua error of this script.
        t:set_len(10)
        pcall(Dissector.call, ddp, tvb(10):tvb(), pinfo, tree)
        -- rdma-graph's Send with Immediate (untagged, RDMAP opcode 12 or 13): the immediate is in
        -- the Invalidate STag field (DDP's ULP bytes 2..5, the segment's bytes 12..15).
        if len >= 28 and tvb(10, 1):uint() < 128 then
            local rop = tvb(11, 1):uint() % 16
            if rop == 12 or rop == 13 then
                t:add(f.send_imm, tvb(12, 4))
                pinfo.cols.info = string.format("Send with %sImmediate 0x%08x (rdma-graph)",
                    rop == 13 and "SE and " or "", tvb(12, 4):uint())
            end
        end
    elseif op == OP_DATA then
        t:add(f.pure_ack, true):set_generated()
        pinfo.cols.info = string.format("ACK next=%u cumulative=%u", psn, ack)
    elseif op == OP_PROBE or op == OP_PROBE_ACK then
        -- rdma-graph's: a retransmission timeout's question, and its answer (PROTOCOL.md section 5).
        pinfo.cols.info = string.format("%s next=%u cumulative=%u", name, psn, ack)
    elseif op == OP_SACK then
        local range = string.format("[%u, %u)", psn, ack)
        t:add(f.sack, range):set_generated()
        pinfo.cols.info = "SACK " .. range
    elseif op == OP_REQ or op == OP_ACCEPT or op == OP_REJECT then
        -- private-data-length(2) ird(2) ord(2), then the private data.
        local pdlen = cm_body(tvb, t, len, op == OP_REJECT and f.reject_reason or f.ird, f.ord)
        if pdlen == nil then return len end
        if op == OP_REJECT then
            pinfo.cols.info = string.format("REJECT reason %u private data %u bytes", tvb(12, 2):uint(), pdlen)
        else
            pinfo.cols.info = string.format("%s IRD=%u ORD=%u private data %u bytes", name,
                tvb(12, 2):uint(), tvb(14, 2):uint(), pdlen)
        end
    elseif op_names[op] == nil then
        t:add_proto_expert_info(e.unknown)
    end
    if (op == OP_FIN or op == OP_SACK or op == OP_PROBE or op == OP_PROBE_ACK) and len > 10 then
        t:add_proto_expert_info(e.trailing)
    end
    return len
end

-- No fixed port (each QP has its own): offered to "Decode As" for UDP ports only.
DissectorTable.get("udp.port"):add_for_decode_as(trp)
