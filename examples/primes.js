// The first primes, by trial division. Run with: hlctl exec examples/primes.js
function isPrime(n) {
  for (let d = 2; d * d <= n; d++) if (n % d === 0) return false;
  return n > 1;
}
const primes = [];
for (let n = 2; primes.length < 10; n++) if (isPrime(n)) primes.push(n);
console.log("first ten primes:", primes.join(", "));
// The last expression is the program's result.
({ count: primes.length, largest: primes[primes.length - 1] })
