var v1 = '';
try {
    var v2 = v1.padEnd(2147483620, 0);
} catch(_) {}

